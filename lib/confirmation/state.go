package confirmation

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/heedhq/heed/events"
)

// AnswerRecord is one answer event as the log holds it, with its verdict.
type AnswerRecord struct {
	Seq     uint64
	EventID string
	Source  string
	At      time.Time
	Data    events.ConfirmAnsweredData
	Refusal *Refusal // nil: this is the answer that took effect, or a counted vote
	// Counted: a vote towards the quorum that did not itself take effect.
	Counted bool
}

// State is a confirmation as its events tell it.
type State struct {
	ID          string
	Gate        Gate
	Request     *events.ConfirmRequestedData
	RequestedAt time.Time
	// Answer is the answer that took effect (the gate's winner), with its
	// event id and time.
	Answer     *events.ConfirmAnsweredData
	AnswerID   string
	AnsweredAt time.Time
	Expired    *events.ConfirmExpiredData
	Delegated  *events.ConfirmDelegatedData
	// Answers are every answer event in log order, each with its verdict.
	Answers []AnswerRecord
	bySeq   map[uint64]int // stored answers: sequence → index in Answers
	// Reported are the answer event ids whose refusal is in the log.
	Reported map[string]bool
	LastSeq  uint64 // sequence of the confirmation's last message in the log
}

// New returns the state of a confirmation with no events yet.
func New(id string) *State {
	return &State{ID: id, Reported: map[string]bool{}, bySeq: map[uint64]int{}}
}

// Clone returns a copy of s that folding more events into either leaves
// the other alone.
func (s *State) Clone() *State {
	c := *s
	c.Gate.Votes = slices.Clone(s.Gate.Votes) // votes are appended to
	c.Answers = slices.Clone(s.Answers)
	c.bySeq = maps.Clone(s.bySeq)
	c.Reported = maps.Clone(s.Reported)
	if c.bySeq == nil {
		c.bySeq = map[uint64]int{}
	}
	if c.Reported == nil {
		c.Reported = map[string]bool{}
	}
	return &c
}

// Open reports whether the confirmation still takes an answer.
func (s *State) Open() bool { return s.Gate.Open() }

// HasOption reports whether v is one of the offered values.
func (s *State) HasOption(v string) bool { return s.Gate.has(v) }

// Apply folds one event (stored at seq; 0 if not yet stored) into the
// state. For an answer it returns the refusal, or nil if it took effect.
func (s *State) Apply(ev *events.Event, seq uint64) (*Refusal, error) {
	if seq > s.LastSeq {
		s.LastSeq = seq
	}
	switch events.Type(ev.Type()) {
	case events.ConfirmRequested:
		var d events.ConfirmRequestedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return nil, err
		}
		if s.Request == nil {
			s.Request, s.RequestedAt = &d, ev.Time()
			s.Gate.Request(&d)
		}
	case events.ConfirmAnswered:
		var d events.ConfirmAnsweredData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return nil, err
		}
		// The same stored message again (a redelivery) keeps its verdict.
		// Every stored message is judged, even one that reuses an earlier
		// event's id (a writer without Nats-Msg-Id, or after the duplicate
		// window): readers that keep only a Gate judge it too.
		if i, ok := s.bySeq[seq]; ok && seq > 0 {
			return s.Answers[i].Refusal, nil
		}
		if seq == 0 {
			for _, a := range s.Answers {
				if a.EventID == ev.ID() {
					return a.Refusal, nil // an event applied before it was stored
				}
			}
		}
		r := s.Gate.Answer(ev.ID(), &d, ev.Time(), seq)
		counted := r == nil && s.Gate.Winner == nil
		if r == nil && !counted {
			s.Answer, s.AnswerID, s.AnsweredAt = &d, ev.ID(), ev.Time()
		}
		if seq > 0 {
			s.bySeq[seq] = len(s.Answers)
		}
		s.Answers = append(s.Answers, AnswerRecord{Seq: seq, EventID: ev.ID(), Source: ev.Source(), At: ev.Time(), Data: d, Refusal: r, Counted: counted})
		return r, nil
	case events.ConfirmExpired:
		var d events.ConfirmExpiredData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return nil, err
		}
		if s.Expired == nil && s.Gate.Open() {
			s.Expired = &d
		}
		s.Gate.Expire(&d)
	case events.ConfirmDelegated:
		var d events.ConfirmDelegatedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return nil, err
		}
		if s.Delegated == nil {
			s.Delegated = &d
		}
	case events.ConfirmRefused:
		var d events.ConfirmRefusedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return nil, err
		}
		s.Reported[d.AnswerID] = true
	}
	return nil, nil
}

// Compact drops what only the answer that took effect needed (the
// question's text and context) once it has been acted on: a reader that
// keeps states in memory keeps the gate, the answers' verdicts and the
// run, skill and step.
func (s *State) Compact() {
	if s.Answer == nil || s.Request == nil {
		return
	}
	s.Request = &events.ConfirmRequestedData{RunID: s.Request.RunID, Skill: s.Request.Skill, Step: s.Request.Step, Requester: s.Request.Requester}
	s.Delegated = nil
}

// AnswerAt returns the answer stored at seq.
func (s *State) AnswerAt(seq uint64) (AnswerRecord, bool) {
	i, ok := s.bySeq[seq]
	if !ok {
		return AnswerRecord{}, false
	}
	return s.Answers[i], true
}

// Load reads a confirmation's events from the log. A confirmation without
// a request is an error with code not_found (the state is returned too:
// answers may have come before their question).
func Load(ctx context.Context, bus *events.Bus, id string) (*State, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid confirmation id", id)
	}
	s := New(id)
	_, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, events.SubjectFilter("confirm", id), 0, func(raw events.RawMsg) error {
		// Every message counts for the stream's expected-last-sequence
		// check, including what the gate dead-lettered.
		s.LastSeq = max(s.LastSeq, raw.Seq)
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			return nil // dead-lettered: not part of the confirmation
		}
		_, err = s.Apply(ev, raw.Seq)
		return err
	})
	if err != nil {
		return nil, err
	}
	if s.Request == nil {
		return s, &events.Error{Code: events.CodeNotFound, Message: fmt.Sprintf("no confirmation %q", id)}
	}
	return s, nil
}

// LoadVerdicts reads what judging a confirmation's answers needs and
// nothing else: its requests, expiries and answers (the only events the
// gate folds) and the refusals already reported, each from its own
// literal subject, merged in log order. The verdicts, the winner, the
// request and Reported are those Load gives; LastSeq is not the
// confirmation's last message (delegations are not read, and the reads
// are not one snapshot of the log), so a writer's expected-sequence guard
// must come from Load.
//
// It exists for the cost on the server: a direct get of a literal subject
// finds its messages from the subject index, where the wildcard
// heed.confirm.<id>.> makes nats-server walk the log message by message
// from the request to the answer.
func LoadVerdicts(ctx context.Context, bus *events.Bus, id string) (*State, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid confirmation id", id)
	}
	types := []events.Type{events.ConfirmRequested, events.ConfirmExpired, events.ConfirmAnswered, events.ConfirmRefused}
	msgs := make([][]events.RawMsg, len(types))
	errs := make([]error, len(types))
	var wg sync.WaitGroup
	for i, t := range types {
		wg.Go(func() {
			_, errs[i] = events.ReadHistory(ctx, bus.JetStream(), events.EventStream, t.Subject(id), 0, func(raw events.RawMsg) error {
				msgs[i] = append(msgs[i], raw)
				return nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	all := slices.Concat(msgs...)
	slices.SortFunc(all, func(a, b events.RawMsg) int { return cmp.Compare(a.Seq, b.Seq) })
	s := New(id)
	for _, raw := range all {
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			continue // dead-lettered: not part of the confirmation
		}
		if _, err := s.Apply(ev, raw.Seq); err != nil {
			return nil, err
		}
	}
	if s.Request == nil {
		return s, &events.Error{Code: events.CodeNotFound, Message: fmt.Sprintf("no confirmation %q", id)}
	}
	return s, nil
}

// RefusedEvent is the heed.confirm.refused event that makes a refused
// answer visible. Its id derives from the answer's log position, so every
// router that judges the answer writes the same event.
func RefusedEvent(id, source string, a AnswerRecord) (events.Event, error) {
	// Within the event's schema whatever the answer held: event ids are
	// not bounded by the wire format, and a reason lists the options.
	d := events.ConfirmRefusedData{
		AnswerID: clip(a.EventID, 1000), AnswerSeq: a.Seq, Choice: a.Data.Choice, Method: a.Data.Method, By: a.Data.By, Channel: a.Data.Channel,
		Code: a.Refusal.Code, Reason: clip(a.Refusal.Reason, 4000),
	}
	if w := a.Refusal.Winner; w != nil {
		d.Winner = &events.AnswerRef{EventID: clip(w.EventID, 1000), Choice: w.Choice, Method: w.Method, By: w.By, Channel: w.Channel, At: w.At}
	}
	return events.NewEvent(events.ConfirmRefused, id, id+"/refused/"+strconv.FormatUint(a.Seq, 10), source, d)
}

// clip shortens s to at most n bytes (on a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// ReadAt bounds how long LoadAt and LoadVerdictsAt read again for a
// message the log is known to hold.
const ReadAt = time.Second

// LoadAt is Load for a reader that knows the log holds the
// confirmation's message at seq (a consumer that was delivered it): a
// read that ends before seq came from a replica behind the log (a direct
// get on an R3 stream may be answered by any replica) and is read again,
// for up to ReadAt; after that the short state is returned.
func LoadAt(ctx context.Context, bus *events.Bus, id string, seq uint64) (*State, error) {
	return readAt(ctx, seq, func() (*State, error) { return Load(ctx, bus, id) })
}

// LoadVerdictsAt is LoadAt for LoadVerdicts: seq is one of the
// confirmation's requests, expiries or answers.
func LoadVerdictsAt(ctx context.Context, bus *events.Bus, id string, seq uint64) (*State, error) {
	return readAt(ctx, seq, func() (*State, error) { return LoadVerdicts(ctx, bus, id) })
}

func readAt(ctx context.Context, seq uint64, load func() (*State, error)) (*State, error) {
	deadline := time.Now().Add(ReadAt)
	for {
		st, err := load()
		if err != nil && events.CodeOf(err) != events.CodeNotFound {
			return st, err
		}
		if (st != nil && st.LastSeq >= seq) || time.Now().After(deadline) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, err
		case <-time.After(25 * time.Millisecond):
		}
	}
}
