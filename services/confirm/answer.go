package confirm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/oklog/ulid/v2"
)

// ScheduleSubject is where a confirmation's deadline waits as a
// server-side message schedule.
func ScheduleSubject(id string) string { return events.SchedulePrefix + ".confirm." + id }

// AlreadyAnsweredError is returned to every answer after the first.
type AlreadyAnsweredError struct {
	ID     string
	By     string
	Method string
	Choice string
	At     time.Time
}

func (e *AlreadyAnsweredError) Error() string {
	return fmt.Sprintf("confirmation %s was already answered by %s at %s with %q (method %s)",
		e.ID, e.By, e.At.Local().Format("2006-01-02 15:04:05.000"), e.Choice, e.Method)
}

// Is makes errors.Is(err, events.ErrConflict) true.
func (e *AlreadyAnsweredError) Is(target error) bool {
	var t *events.Error
	return errors.As(target, &t) && t.Code == events.CodeConflict
}

// AnswerOption adjusts an answer.
type AnswerOption interface{ applyAnswer(*answerConfig) }

type answerConfig struct{ eventID string }

// WithEventID fixes the answer event's id, so that a retried answer from
// the same decision (a timeout after a crash) is stored once.
type WithEventID string

func (w WithEventID) applyAnswer(c *answerConfig) { c.eventID = string(w) }

// Answer records the answer to confirmation id, if it is the first. The
// stream enforces it: the answer is written only if nothing was appended to
// the confirmation since this caller read it (expected last sequence on
// heed.confirm.<id>.>), so of any number of concurrent answers from any
// number of processes exactly one is stored. Every other caller gets an
// *AlreadyAnsweredError naming who answered, when and with what.
func Answer(ctx context.Context, bus *events.Bus, source, id string, a events.ConfirmAnsweredData, opts ...AnswerOption) (*State, error) {
	var cfg answerConfig
	for _, o := range opts {
		o.applyAnswer(&cfg)
	}
	if strings.TrimSpace(a.Choice) == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "an answer needs a choice")
	}
	for attempt := 0; attempt < 20; attempt++ {
		st, err := Load(ctx, bus, id)
		if err != nil {
			return nil, err
		}
		if st.Answer != nil {
			return st, &AlreadyAnsweredError{ID: id, By: st.Answer.By, Method: st.Answer.Method, Choice: st.Answer.Choice, At: st.AnsweredAt}
		}
		if !st.HasOption(a.Choice) {
			return st, events.Errorf(events.CodeInvalidRequest, "%q is not an option of confirmation %s (options: %s)", a.Choice, id, optionList(st))
		}
		if st.Expired != nil && a.Method != events.MethodTimeout {
			return st, events.Errorf(events.CodeConflict, "confirmation %s expired at %s; its default %q applies", id, st.Expired.Deadline.Local().Format("15:04:05"), st.Expired.Default)
		}
		a.RunID = st.Request.RunID
		if a.DurationMS == 0 && !st.RequestedAt.IsZero() {
			a.DurationMS = float64(time.Since(st.RequestedAt).Microseconds()) / 1000
		}
		eid := cfg.eventID
		if eid == "" {
			eid = id + "/answer/" + strings.ToLower(ulid.Make().String())
		}
		ev, err := events.NewEvent(events.ConfirmAnswered, id, eid, source, a)
		if err != nil {
			return nil, err
		}
		_, err = bus.Publish(ctx, &ev,
			events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: st.LastSeq},
			events.PurgeSchedule{Subject: ScheduleSubject(id)})
		if err == nil {
			st.Answer, st.AnsweredAt = &a, ev.Time()
			return st, nil
		}
		if !errors.Is(err, events.ErrConflict) {
			return nil, err
		}
		// Someone appended first: read again and decide.
	}
	return nil, events.Errorf(events.CodeConflict, "confirmation %s keeps changing; try again", id)
}

func optionList(st *State) string {
	var vs []string
	for _, o := range st.Request.Options {
		vs = append(vs, o.Value)
	}
	return strings.Join(vs, ", ")
}
