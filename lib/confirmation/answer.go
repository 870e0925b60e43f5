package confirmation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/oklog/ulid/v2"
)

// Subjects of a confirmation's deadline. The deadline waits in the event
// stream as a nats-server message schedule on ScheduleSubject; when it
// fires, the server stores a plain message (no CloudEvents headers: it is
// not an event) on FiredSubject, and the confirm router turns it into the
// heed.confirm.expired event.
func ScheduleSubject(id string) string { return events.SchedulePrefix + ".confirm." + id }

// FiredSubject is where a confirmation's deadline lands when it fires.
func FiredSubject(id string) string { return events.SchedulePrefix + ".fired.confirm." + id }

// AlreadyAnswered is the cause of the conflict a late answer gets: the
// answer that took effect.
type AlreadyAnswered struct {
	ID     string
	Winner Winner
}

func (e *AlreadyAnswered) Error() string {
	w := e.Winner
	return fmt.Sprintf("confirmation %s was already answered by %s at %s with %q (method %s)",
		e.ID, w.By, w.At.UTC().Format("2006-01-02T15:04:05.000Z"), w.Choice, w.Method)
}

// AnswerRef names the answer that took effect (command.Answered).
func (e *AlreadyAnswered) AnswerRef() events.AnswerRef {
	w := e.Winner
	return events.AnswerRef{EventID: w.EventID, Choice: w.Choice, Method: w.Method, By: w.By, Channel: w.Channel, At: w.At}
}

// conflict wraps AlreadyAnswered in heed's error with code conflict.
func conflict(id string, w *Winner) error {
	cause := &AlreadyAnswered{ID: id, Winner: *w}
	return &events.Error{Code: events.CodeConflict, Message: cause.Error(), Err: cause}
}

// AnswerOption adjusts an answer.
type AnswerOption interface{ applyAnswer(*answerConfig) }

type answerConfig struct {
	eventID string
	known   *State
}

// FromState starts from a confirmation state the caller already holds
// (a copy it owns, see State.Clone) instead of reading the log: the write's
// expected-sequence guard fails if anything was appended after the state's
// LastSeq, and the answer is then judged again from the log. A state that
// already refuses the answer (answered, expired, not an option) refuses it
// without a read: what made it refuse is in the log for good.
type FromState struct{ State *State }

func (f FromState) applyAnswer(c *answerConfig) { c.known = f.State }

// WithEventID fixes the answer event's id, so that a retried answer from
// the same decision (a timeout after a crash) is stored once.
type WithEventID string

func (w WithEventID) applyAnswer(c *answerConfig) { c.eventID = string(w) }

// counted reports whether the answer event eventID is in the log and was
// not refused: the answer that took effect or a counted vote.
func (s *State) counted(eventID string) bool {
	for _, a := range s.Answers {
		if a.EventID == eventID {
			return a.Refusal == nil
		}
	}
	return false
}

// Answer writes answer a to confirmation id if it would take effect. The
// stream enforces it: the answer is appended only if nothing was appended
// to the confirmation since this caller read it (expected last sequence on
// heed.confirm.<id>.>), and the same write purges the deadline's schedule.
// Of any number of concurrent answers from any number of processes exactly
// one is stored this way; every other caller re-reads and gets an error
// with code conflict naming the winner (errors.As to *AlreadyAnswered).
// A choice that is not an option, or a run_id that is not the request's,
// is refused with invalid_request; an answer after the deadline with
// conflict; an answer by someone the request's approvers do not name
// with invalid_request (not_allowed), a second vote by the same voter with
// conflict (already_voted), the cause a *Refusal in both cases.
//
// With a quorum the answer written may be a vote that does not take
// effect yet: then the returned state's Answer is nil and the last of its
// Answers is this vote, Counted.
func Answer(ctx context.Context, bus *events.Bus, source, id string, a events.ConfirmAnsweredData, opts ...AnswerOption) (*State, error) {
	var cfg answerConfig
	for _, o := range opts {
		o.applyAnswer(&cfg)
	}
	if strings.TrimSpace(a.Choice) == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "an answer needs a choice")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	// Someone may append first (an answer, a refusal, anything): then the
	// write fails as stale, and the question is read and judged again, for
	// as long as the caller allows.
	known := cfg.known
	st, err := events.RetryStale(ctx, 0, func() (*State, error) {
		st := known
		known = nil // a retry reads the log
		if st == nil || st.ID != id || st.Request == nil {
			var err error
			if st, err = Load(ctx, bus, id); err != nil {
				return st, err
			}
		}
		if cfg.eventID != "" && (st.AnswerID == cfg.eventID || st.counted(cfg.eventID)) {
			return st, nil // this very decision took effect (or was counted) before: a retry
		}
		a := a
		if a.RunID == "" {
			a.RunID = st.Gate.RunID
		}
		if r := st.Gate.Judge(&a); r != nil {
			switch r.Code {
			case RefusedAnswered:
				return st, conflict(id, r.Winner)
			case RefusedExpired:
				return st, events.Errorf(events.CodeConflict, "confirmation %s expired at %s; its default %q applies", id, st.Expired.Deadline.UTC().Format(time.RFC3339), st.Gate.Default)
			case RefusedNotAllowed:
				return st, &events.Error{Code: events.CodeInvalidRequest, Message: fmt.Sprintf("confirmation %s: %s", id, r.Reason), Err: r}
			case RefusedVoted:
				return st, &events.Error{Code: events.CodeConflict, Message: fmt.Sprintf("confirmation %s: %s", id, r.Reason), Err: r}
			default:
				return st, events.Errorf(events.CodeInvalidRequest, "confirmation %s: %s", id, r.Reason)
			}
		}
		if a.DurationMS == 0 && !st.RequestedAt.IsZero() {
			a.DurationMS = max(float64(time.Since(st.RequestedAt).Microseconds())/1000, 0)
		}
		eid := cfg.eventID
		if eid == "" {
			eid = id + "/answer/" + strings.ToLower(ulid.Make().String())
		}
		ev, err := events.NewEvent(events.ConfirmAnswered, id, eid, source, a)
		if err != nil {
			return nil, err
		}
		opts := []events.PublishOption{events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: st.LastSeq}}
		if st.Gate.Decides(&a) {
			// Only the answer that takes effect ends the deadline; a vote
			// leaves it running.
			opts = append(opts, events.PurgeSchedule{Subject: ScheduleSubject(id)})
		}
		ack, err := bus.Publish(ctx, &ev, opts...)
		if err != nil {
			return nil, err
		}
		if ack.Duplicate {
			// The same decision was stored before (a retried timeout):
			// read back what took effect.
			return nil, events.ErrStaleRead
		}
		if _, err := st.Apply(&ev, ack.Sequence); err != nil {
			return nil, err
		}
		return st, nil
	})
	if ctx.Err() != nil && (errors.Is(err, events.ErrStaleRead) || errors.Is(err, ctx.Err())) {
		return nil, events.Errorf(events.CodeUnavailable, "confirmation %s kept changing until the deadline; nothing was written: %v", id, ctx.Err())
	}
	return st, err
}
