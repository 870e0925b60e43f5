package escalator

import (
	"context"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// Projection keeps heed_escalations: each escalation's summary and each
// session's count of held requests. OnSummary, when set, sees every summary it
// writes (the escalator's held index); replay leaves it nil.
type Projection struct {
	OnSummary func(readmodel.Escalation)
}

func (*Projection) Name() string      { return "escalations" }
func (*Projection) Bucket() string    { return readmodel.EscalationsBucket }
func (*Projection) Filters() []string { return []string{"heed.escalation.>"} }

// Apply folds one escalation event into its summary and its session's count.
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
	// The session's count first, the summary last: a redelivery after a
	// crash between the two finds the summary as it was and makes both
	// writes again (the count's changes nothing: its last change is this
	// event's id). The other way round, the redelivery would find the
	// request decided already, leave the count alone and keep the session
	// holding a request that is over.
	if err := p.session(ctx, s, ev.ID(), e, wasHeld, before); err != nil {
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

// session keeps the session's count of held requests in step. It is
// written before the summary, so the summary as it was (before) says
// whether this request is counted: a request held before and after with
// the same criticality (an offer, an escalation, a route) leaves the count
// as it is, unread. A redelivered event finds its own id as the count's
// last change and changes nothing (a count written and then deleted by a
// second application would lose a request), or, for a request that left a
// session's last held one, the key gone: never below zero.
func (p *Projection) session(ctx context.Context, s events.Store, eventID string, e readmodel.Escalation, wasHeld bool, before readmodel.Escalation) error {
	held := e.Status == events.EscalationHeld
	if !held && !wasHeld {
		return nil
	}
	if wasHeld && before.Session != e.Session {
		// A summary's session does not change; were it to, the old
		// session stops counting the request first.
		if err := p.count(ctx, s, eventID, before.Session, -1, -critical(before)); err != nil {
			return err
		}
		wasHeld = false
	}
	switch {
	case held && wasHeld:
		if d := critical(e) - critical(before); d != 0 {
			return p.count(ctx, s, eventID, e.Session, 0, d)
		}
		return nil
	case held:
		return p.count(ctx, s, eventID, e.Session, 1, critical(e))
	default:
		return p.count(ctx, s, eventID, e.Session, -1, -critical(before))
	}
}

// count adds to a session's count of held requests and of critical ones.
func (p *Projection) count(ctx context.Context, s events.Store, eventID, session string, held, crit int) error {
	key := readmodel.SessionKey(session)
	var se readmodel.SessionEscalations
	if _, err := s.Get(ctx, key, &se); err != nil {
		return err
	}
	if se.Last == eventID {
		return nil // this event changed it already (a redelivery)
	}
	se = se.Counted()
	se.Session, se.Last = session, eventID
	// Never below zero: a redelivered departure whose first application
	// deleted the session's last count finds no key. (A crash across the
	// upgrade from the list, between the list's write and the summary's,
	// can also leave a count one off; `heed replay --apply` mends it.)
	se.Count, se.Critical = max(se.Count+held, 0), max(se.Critical+crit, 0)
	if se.Count == 0 {
		return s.Delete(ctx, key)
	}
	se.Critical = min(se.Critical, se.Count)
	return s.Put(ctx, key, se)
}

func critical(e readmodel.Escalation) int {
	if e.Critical {
		return 1
	}
	return 0
}
