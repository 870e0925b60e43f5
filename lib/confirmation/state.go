package confirmation

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/heedhq/heed/events"
)

// AnswerRecord is one answer event as the log holds it, with its verdict.
type AnswerRecord struct {
	Seq     uint64
	EventID string
	Source  string
	At      time.Time
	Data    events.ConfirmAnsweredData
	Refusal *Refusal // nil: this is the answer that took effect
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
	// Reported are the answer event ids whose refusal is in the log.
	Reported map[string]bool
	LastSeq  uint64 // sequence of the confirmation's last message in the log
}

// New returns the state of a confirmation with no events yet.
func New(id string) *State { return &State{ID: id, Reported: map[string]bool{}} }

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
		for _, a := range s.Answers {
			if a.EventID == ev.ID() {
				return a.Refusal, nil // the same event again
			}
		}
		r := s.Gate.Answer(ev.ID(), &d, ev.Time(), seq)
		if r == nil {
			s.Answer, s.AnswerID, s.AnsweredAt = &d, ev.ID(), ev.Time()
		}
		s.Answers = append(s.Answers, AnswerRecord{Seq: seq, EventID: ev.ID(), Source: ev.Source(), At: ev.Time(), Data: d, Refusal: r})
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

// AnswerAt returns the answer stored at seq.
func (s *State) AnswerAt(seq uint64) (AnswerRecord, bool) {
	for _, a := range s.Answers {
		if a.Seq == seq {
			return a, true
		}
	}
	return AnswerRecord{}, false
}

// Load reads a confirmation's events from the log. A confirmation without
// a request is an error with code not_found (the state is returned too:
// answers may have come before their question).
func Load(ctx context.Context, bus *events.Bus, id string) (*State, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid confirmation id", id)
	}
	s := New(id)
	_, err := events.ReadLog(ctx, bus.JetStream(), events.EventStream, []string{events.SubjectFilter("confirm", id)}, 0, func(raw events.RawMsg) error {
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

// RefusedEvent is the heed.confirm.refused event that makes a refused
// answer visible. Its id derives from the answer's log position, so every
// router that judges the answer writes the same event.
func RefusedEvent(id, source string, a AnswerRecord) (events.Event, error) {
	d := events.ConfirmRefusedData{
		AnswerID: a.EventID, AnswerSeq: a.Seq, Choice: a.Data.Choice, Method: a.Data.Method, By: a.Data.By, Channel: a.Data.Channel,
		Code: a.Refusal.Code, Reason: a.Refusal.Reason,
	}
	if w := a.Refusal.Winner; w != nil {
		d.Winner = &events.AnswerRef{EventID: w.EventID, Choice: w.Choice, Method: w.Method, By: w.By, Channel: w.Channel, At: w.At}
	}
	return events.NewEvent(events.ConfirmRefused, id, id+"/refused/"+strconv.FormatUint(a.Seq, 10), source, d)
}
