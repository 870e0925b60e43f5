// Package confirm is the confirm router: it answers every confirmation
// request in layers (override, learned preference, the run's agent, people)
// and enforces deadlines. Its client half (Load, Answer) is what every
// channel uses to answer: the CLI, the terminal prompt, the web console.
package confirm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/heedhq/heed/events"
)

// State is a confirmation as its events tell it.
type State struct {
	ID          string
	Request     *events.ConfirmRequestedData
	RequestedAt time.Time
	Answer      *events.ConfirmAnsweredData
	AnsweredAt  time.Time
	Expired     *events.ConfirmExpiredData
	LastSeq     uint64 // sequence of the confirmation's last event
}

// Open reports whether the confirmation still takes answers.
func (s *State) Open() bool { return s.Request != nil && s.Answer == nil }

// HasOption reports whether v is one of the offered values.
func (s *State) HasOption(v string) bool {
	if s.Request == nil {
		return false
	}
	for _, o := range s.Request.Options {
		if o.Value == v {
			return true
		}
	}
	return false
}

// Apply folds one event into the state.
func (s *State) Apply(ev *events.Event, seq uint64) error {
	if seq > s.LastSeq {
		s.LastSeq = seq
	}
	switch events.Type(ev.Type()) {
	case events.ConfirmRequested:
		if s.Request != nil {
			return nil
		}
		var d events.ConfirmRequestedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return err
		}
		s.Request, s.RequestedAt = &d, ev.Time()
	case events.ConfirmAnswered:
		if s.Answer != nil {
			return nil
		}
		var d events.ConfirmAnsweredData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return err
		}
		s.Answer, s.AnsweredAt = &d, ev.Time()
	case events.ConfirmExpired:
		var d events.ConfirmExpiredData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return err
		}
		s.Expired = &d
	}
	return nil
}

// Load reads a confirmation's events from the log.
func Load(ctx context.Context, bus *events.Bus, id string) (*State, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid confirmation id", id)
	}
	s := &State{ID: id}
	_, err := events.ReadLog(ctx, bus.JetStream(), events.EventStream, []string{events.SubjectFilter("confirm", id)}, 0, func(raw events.RawMsg) error {
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			// Dead-lettered by the gate; not part of the confirmation. It
			// still counts for the stream's expected-last-sequence check.
			s.LastSeq = max(s.LastSeq, raw.Seq)
			return nil
		}
		return s.Apply(ev, raw.Seq)
	})
	if err != nil {
		return nil, err
	}
	if s.Request == nil {
		return s, &events.Error{Code: events.CodeNotFound, Message: fmt.Sprintf("no confirmation %q", id)}
	}
	return s, nil
}
