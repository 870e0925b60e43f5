package escalator

import (
	"context"
	"slices"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// Projection keeps heed_escalations: each escalation's summary and each
// session's held requests. OnSummary, when set, sees every summary it
// writes (the escalator's held index); replay leaves it nil.
type Projection struct {
	OnSummary func(readmodel.Escalation)
}

func (*Projection) Name() string      { return "escalations" }
func (*Projection) Bucket() string    { return readmodel.EscalationsBucket }
func (*Projection) Filters() []string { return []string{"heed.escalation.>"} }

// Apply folds one escalation event into its summary and its session's list.
func (p *Projection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	var e readmodel.Escalation
	key := readmodel.EscalationKey(ev.Subject())
	found, err := s.Get(ctx, key, &e)
	if err != nil {
		return err
	}
	t := events.Type(ev.Type())
	if !found && t != events.EscalationRequested {
		return nil // a request's own event comes first
	}
	wasHeld := found && e.Status == events.EscalationHeld
	before := e
	switch t {
	case events.EscalationRequested:
		if found {
			return nil
		}
		var d events.EscalationRequestedData
		if err := jsonUnmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		e = readmodel.Escalation{ID: ev.Subject(), Session: d.Session, Operation: d.Operation, Scope: d.Scope, Environment: d.Environment,
			Status: events.EscalationHeld, RequestedAt: ev.Time().UTC()}
		if d.Risk != nil {
			e.Risk = *d.Risk
		}
		if d.Confidence != nil {
			e.Confidence = *d.Confidence
		}
	case events.EscalationRouted:
		var d events.EscalationRoutedData
		if err := jsonUnmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		e.Risk, e.Confidence, e.Critical, e.Route, e.Priority, e.Tier = d.Risk, d.Confidence, d.Critical, d.Decision, d.Priority, d.Tier
	case events.EscalationOffered:
		var d events.EscalationOfferedData
		if err := jsonUnmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		e.Tier, e.ConfirmID = d.Tier, d.ConfirmID
	case events.EscalationEscalated:
		var d events.EscalationEscalatedData
		if err := jsonUnmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		e.EscalationCount = d.EscalationCount
		if d.ToTier != "" {
			e.Tier = d.ToTier
		}
		e.ConfirmID = ""
	case events.EscalationDecided:
		if e.Status != events.EscalationHeld {
			return nil
		}
		var d events.EscalationDecidedData
		if err := jsonUnmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		e.Status, e.Method, e.By, e.DecidedAt = d.Decision, d.Method, d.By, ev.Time().UTC()
	case events.EscalationOutcome:
		var d events.EscalationOutcomeData
		if err := jsonUnmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		if e.Outcome == "" {
			e.Outcome = d.Outcome
		}
	default:
		return nil
	}
	// The session's list first, the summary last: a redelivery after a
	// crash between the two finds the summary as it was and makes both
	// writes again (the list skips what it has). The other way round, the
	// redelivery would find the request decided already, leave the list
	// alone and keep the session holding a request that is over.
	if err := p.session(ctx, s, e, wasHeld, before); err != nil {
		return err
	}
	if err := s.Put(ctx, key, e); err != nil {
		return err
	}
	if p.OnSummary != nil {
		p.OnSummary(e)
	}
	return nil
}

// session keeps the session's list of held requests in step. The list
// is written before the summary, so the summary as it was (before) says
// what the list holds of this request: a request held before and after
// with the same risk and criticality (an offer, an escalation, a route
// that keeps the request's own risk) leaves the list as it is, unread.
// A session's list is the longest value the projection writes; most
// events of a held request do not change it.
func (p *Projection) session(ctx context.Context, s events.Store, e readmodel.Escalation, wasHeld bool, before readmodel.Escalation) error {
	held := e.Status == events.EscalationHeld
	if !held && !wasHeld {
		return nil
	}
	if held && wasHeld && before.Risk == e.Risk && before.Critical == e.Critical && before.Session == e.Session {
		return nil
	}
	key := readmodel.SessionKey(e.Session)
	var se readmodel.SessionEscalations
	if _, err := s.Get(ctx, key, &se); err != nil {
		return err
	}
	se.Session = e.Session
	i := slices.IndexFunc(se.Held, func(h readmodel.HeldRef) bool { return h.ID == e.ID })
	switch {
	case held && i >= 0:
		se.Held[i] = readmodel.HeldRef{ID: e.ID, Risk: e.Risk, Critical: e.Critical}
	case held:
		se.Held = append(se.Held, readmodel.HeldRef{ID: e.ID, Risk: e.Risk, Critical: e.Critical})
	case i >= 0:
		se.Held = slices.Delete(se.Held, i, i+1)
	}
	if len(se.Held) == 0 {
		return s.Delete(ctx, key)
	}
	return s.Put(ctx, key, se)
}
