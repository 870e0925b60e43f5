// Package escalation folds an escalation's events into its state
// (command.EscalationState): the escalator decides from it, the client
// waits on it, heed shows it.
package escalation

import (
	"encoding/json"
	"fmt"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
)

// New is the state of escalation id before any event.
func New(id string) *command.EscalationState {
	return &command.EscalationState{ID: id}
}

// Apply folds one event of the escalation's aggregate (stored at seq) into
// st. Events of other kinds are ignored; an event after the decision
// other than the outcome changes nothing (the first decision stands).
func Apply(st *command.EscalationState, ev *events.Event, seq uint64) error {
	t := events.Type(ev.Type())
	if t.Kind() != "escalation" {
		return nil
	}
	if seq > st.Seq {
		st.Seq = seq
	}
	decode := func(v any) error {
		if err := json.Unmarshal(ev.Data(), v); err != nil {
			return fmt.Errorf("%s %s: %w", t, ev.ID(), err)
		}
		return nil
	}
	if st.Decided != nil && t != events.EscalationOutcome {
		return nil
	}
	switch t {
	case events.EscalationRequested:
		if st.Status != "" {
			return nil // a second request event (another id's dedupe window passed): the first stands
		}
		if err := decode(&st.Request); err != nil {
			return err
		}
		st.Status = events.EscalationHeld
		st.RequestedAt = ev.Time().UTC()
	case events.EscalationRouted:
		var d events.EscalationRoutedData
		if err := decode(&d); err != nil {
			return err
		}
		if st.Routed == nil {
			st.Routed = &d
		}
	case events.EscalationOffered:
		var d events.EscalationOfferedData
		if err := decode(&d); err != nil {
			return err
		}
		if d.Offer == len(st.Offers)+1 {
			st.Offers = append(st.Offers, d)
		}
	case events.EscalationEscalated:
		var d events.EscalationEscalatedData
		if err := decode(&d); err != nil {
			return err
		}
		if d.EscalationCount == len(st.Escalations)+1 {
			st.Escalations = append(st.Escalations, d)
		}
	case events.EscalationDecided:
		var d events.EscalationDecidedData
		if err := decode(&d); err != nil {
			return err
		}
		st.Decided = &d
		st.Status = d.Decision
		st.DecidedAt = ev.Time().UTC()
	case events.EscalationOutcome:
		var d events.EscalationOutcomeData
		if err := decode(&d); err != nil {
			return err
		}
		if st.Outcome == nil && st.Decided != nil {
			st.Outcome = &d
		}
	}
	return nil
}

// CurrentOffer is the latest offer, nil before the first.
func CurrentOffer(st *command.EscalationState) *events.EscalationOfferedData {
	if len(st.Offers) == 0 {
		return nil
	}
	return &st.Offers[len(st.Offers)-1]
}
