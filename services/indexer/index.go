// Package indexer keeps the index projection: one entry per aggregate (run,
// confirmation, escalation, ...) with its kind, first and last event, status and event
// count. Because it consumes every event subject, it is also where bad
// input from outside publishers is caught and dead-lettered within moments
// of entering the log, whether or not any other service cares about it.
package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/heedhq/heed/lib/skill"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/runstate"
)

// Projection is the index projection.
type Projection struct{}

func (Projection) Name() string      { return "index" }
func (Projection) Bucket() string    { return readmodel.IndexBucket }
func (Projection) Filters() []string { return events.EventSubjects() }

// Apply folds one event into its aggregate's entry.
func (Projection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	t := events.Type(ev.Type())
	if t == events.FixLearned {
		// A fix the learner refuses (its patch could never apply) is no
		// learned fix: not listed as one either.
		var d events.FixLearnedData
		if json.Unmarshal(ev.Data(), &d) == nil {
			if err := skill.CheckArgsPatch(d.ArgsPatch); err != nil {
				return events.Poison(fmt.Errorf("fix %s: %w", ev.Subject(), err))
			}
		}
	}
	key := readmodel.IndexKey(t.Kind(), ev.Subject())
	var e readmodel.IndexEntry
	if _, err := s.Get(ctx, key, &e); err != nil {
		return err
	}
	if e.Count == 0 && (t == events.PrefForgotten || t == events.FixForgotten) {
		// Forgetting what was never learned: no entry of a preference or
		// fix that never was (the console may write a pref's forgotten).
		return nil
	}
	ref := readmodel.EventRef{ID: ev.ID(), Type: ev.Type(), Time: ev.Time().UTC()}
	if e.Count == 0 {
		e.ID, e.Kind, e.First = ev.Subject(), t.Kind(), ref
	}
	e.Count++
	e.Last = ref
	if t.Kind() == "confirm" {
		if err := applyConfirm(&e, t, ev); err != nil {
			return err
		}
		return s.Put(ctx, key, e)
	}
	if t.Kind() == "escalation" {
		applyEscalation(&e, t, ev)
		return s.Put(ctx, key, e)
	}
	var data struct {
		Skill  string `json:"skill"`
		Driver string `json:"driver"`
		Step   string `json:"step"`
		Name   string `json:"name"`
	}
	var skillObj struct {
		Skill struct {
			Name string `json:"name"`
		} `json:"skill"`
	}
	_ = json.Unmarshal(ev.Data(), &data)
	if t == events.RunRequested {
		_ = json.Unmarshal(ev.Data(), &skillObj)
		data.Skill = skillObj.Skill.Name
	}
	if data.Skill != "" {
		e.Skill = data.Skill
	}
	if data.Driver != "" {
		e.Driver = data.Driver
	}
	if data.Step != "" && t.Kind() == "run" {
		e.Step = data.Step
	}
	if next := status(t, e.Status); next != "" {
		e.Status = next
	}
	return s.Put(ctx, key, e)
}

// applyConfirm folds a confirmation's event into its entry. Answers are
// judged with the rule every reader applies (lib/confirmation): the entry
// takes the first valid answer in log order and counts the others as
// refused, so the index agrees with the run, the router and the audit.
func applyConfirm(e *readmodel.IndexEntry, t events.Type, ev *events.Event) error {
	g := gateOf(e, ev.ID())
	switch t {
	case events.ConfirmRequested:
		var d events.ConfirmRequestedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		if g.Requested {
			return nil // an id is asked once; a second request changes nothing
		}
		g.Request(&d)
		e.RunID, e.Options, e.Default, e.Approvers, e.Quorum = g.RunID, g.Options, g.Default, g.Approvers, g.Quorum
		if e.Skill == "" {
			e.Skill = d.Skill
		}
		e.Step = d.Step
		if e.Status == "" {
			e.Status = readmodel.StatusPending
		}
	case events.ConfirmDelegated:
		if g.Open() && e.Status == readmodel.StatusPending {
			e.Status = readmodel.StatusDelegated
		}
	case events.ConfirmExpired:
		var d events.ConfirmExpiredData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		if g.Open() && !g.Expired {
			g.Expire(&d)
			e.Status, e.Default = readmodel.StatusExpired, g.Default
		}
	case events.ConfirmAnswered:
		var d events.ConfirmAnsweredData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		if r := g.Answer(ev.ID(), &d, ev.Time(), 0); r != nil {
			e.Refused++
			return nil
		}
		e.Votes = votesOf(g)
		if g.Winner == nil {
			return nil // a vote towards the quorum
		}
		e.Status, e.Choice, e.Method, e.By, e.Channel, e.AnswerID = readmodel.StatusAnswered, d.Choice, d.Method, d.By, d.Channel, ev.ID()
	}
	return nil
}

// gateOf rebuilds the gate of a confirmation from its index entry, before
// the event applying (applying) changes it.
func gateOf(e *readmodel.IndexEntry, applying string) *confirmation.Gate {
	g := &confirmation.Gate{Requested: e.Options != nil, RunID: e.RunID, Options: e.Options, Default: e.Default, Expired: e.Status == readmodel.StatusExpired}
	if e.Options == nil && e.First.Type == string(events.ConfirmRequested) && e.First.ID != applying {
		// An entry indexed before the index kept a confirmation's options:
		// its request came first, its options are unknown here. (heed
		// replay rebuilds it with them.)
		g.Requested, g.AnyChoice = true, true
	}
	if e.AnswerID != "" {
		g.Winner = &confirmation.Winner{EventID: e.AnswerID, Choice: e.Choice, Method: e.Method, By: e.By}
	}
	g.Approvers, g.Quorum = e.Approvers, e.Quorum
	for _, v := range e.Votes {
		g.Votes = append(g.Votes, confirmation.Vote{Choice: v.Choice, By: v.By, Channel: v.Channel, At: v.At})
	}
	return g
}

func votesOf(g *confirmation.Gate) []command.Vote {
	var out []command.Vote
	for _, v := range g.Votes {
		out = append(out, command.Vote{Choice: v.Choice, By: v.By, Channel: v.Channel, At: v.At})
	}
	return out
}

// status is the state machine of the index's status field: a run's is the
// one every reader of a run shares (runstate.NextStatus); learned state is
// active until forgotten (and active again when set again). It returns ""
// when the status does not change.
func status(t events.Type, cur string) string {
	if t.Kind() == "run" {
		if next := runstate.NextStatus(cur, t); next != cur {
			return next
		}
		return ""
	}
	if cur == "forgotten" && t != events.PrefSet && t != events.FixLearned {
		return ""
	}
	switch t {
	case events.PrefSet, events.FixLearned:
		return "active"
	case events.PrefForgotten, events.FixForgotten:
		return "forgotten"
	}
	if cur == "" {
		return "active"
	}
	return ""
}

// applyEscalation folds an escalation's event into its entry: held from
// the request until the decided event (the first one: an escalation is
// decided once), then approved or denied.
func applyEscalation(e *readmodel.IndexEntry, t events.Type, ev *events.Event) {
	if e.Status == "" {
		e.Status = events.EscalationHeld
	}
	switch t {
	case events.EscalationRequested:
		var d events.EscalationRequestedData
		if json.Unmarshal(ev.Data(), &d) == nil {
			e.Session, e.Operation, e.Scope, e.RunID = d.Session, d.Operation, d.Scope, d.RunID
			if d.Risk != nil {
				r := *d.Risk
				e.Risk = &r
			}
		}
	case events.EscalationRouted:
		var d events.EscalationRoutedData
		if json.Unmarshal(ev.Data(), &d) == nil {
			r := d.Risk
			e.Risk, e.Critical, e.Route, e.Priority = &r, d.Critical, d.Decision, d.Priority
			if d.Tier != "" {
				e.Tier = d.Tier
			}
		}
	case events.EscalationOffered:
		var d events.EscalationOfferedData
		if json.Unmarshal(ev.Data(), &d) == nil {
			e.Tier, e.ConfirmID, e.EscalationCount = d.Tier, d.ConfirmID, d.EscalationCount
		}
	case events.EscalationEscalated:
		var d events.EscalationEscalatedData
		if json.Unmarshal(ev.Data(), &d) == nil {
			e.EscalationCount = d.EscalationCount
		}
	case events.EscalationDecided:
		var d events.EscalationDecidedData
		if e.Status != events.EscalationHeld || json.Unmarshal(ev.Data(), &d) != nil {
			return
		}
		if d.Decision == events.EscalationApproved || d.Decision == events.EscalationDenied {
			e.Status = d.Decision
		}
		e.Method, e.By, e.Channel = d.Method, d.By, d.Channel
		if d.Tier != "" {
			e.Tier = d.Tier
		}
		if d.ConfirmID != "" {
			e.ConfirmID = d.ConfirmID
		}
	case events.EscalationOutcome:
		var d events.EscalationOutcomeData
		if json.Unmarshal(ev.Data(), &d) == nil && e.Outcome == "" {
			e.Outcome = d.Outcome
		}
	}
}
