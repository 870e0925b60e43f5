package learner

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
)

// pendingRequest is a confirmation awaiting its answer, with the gate
// that judges its answers as every reader does.
type pendingRequest struct {
	Operation string            `json:"operation,omitempty"`
	Scope     string            `json:"scope,omitempty"`
	RunID     string            `json:"run_id,omitempty"`
	Gate      confirmation.Gate `json:"gate,omitzero"`
	// Closed: the answer that took effect was counted. The key stays, this
	// small, so that a second request with the same id (anyone may publish
	// one) does not open the confirmation again.
	Closed bool `json:"closed,omitempty"`
}

type runDecisions struct {
	Keys []string `json:"keys"` // decision keys approved in this run, awaiting its outcome
}

// DecisionsProjection keeps the decision cache.
type DecisionsProjection struct{}

func (DecisionsProjection) Name() string   { return "decisions" }
func (DecisionsProjection) Bucket() string { return readmodel.DecisionsBucket }
func (DecisionsProjection) Filters() []string {
	return []string{"heed.confirm.*.requested", "heed.confirm.*.expired", "heed.confirm.*.answered", "heed.run.*.completed", "heed.run.*.failed",
		"heed.run.*.cancelled", "heed.run.*.abandoned", "heed.escalation.*.decided", "heed.escalation.*.outcome"}
}

// escDecision is an escalation approved by a person or the cache, awaiting
// its outcome (key esc.<esc-id>, removed with the outcome).
type escDecision struct {
	Key string `json:"key"`
}

// countsAsDecision: only a person's decision of an escalation is a
// decision of the cache. A rule's approval says nothing about the
// operation, the final action is nobody's, and the cache's own approval
// counted would feed itself (its outcomes count, see escOutcome).
func countsAsDecision(method string) bool { return method == events.MethodUser }

// Apply folds one event into the cache.
func (DecisionsProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	switch events.Type(ev.Type()) {
	case events.ConfirmRequested:
		var d events.ConfirmRequestedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return nil
		}
		if escID, _, ok := events.OfferOfConfirmID(ev.Subject()); ok && d.Context["escalation_id"] == escID {
			return nil // an escalation's offer: counted once, by its decided event
		}
		// A skill step's operation is the runner's word only: anyone may
		// ask a question through heed.cmd.confirm.request and label it
		// with any skill and step, and people's answers to it must not
		// count for that skill's step.
		op := d.Skill + "/" + d.Step
		if d.Skill == "" || ev.Source() != events.RunnerSource {
			op = "direct/" + d.Requester
		}
		scope := "default"
		if in, ok := d.Context["inputs"].(map[string]any); ok {
			if env, ok := in["environment"].(string); ok && env != "" {
				scope = env
			}
		}
		var p pendingRequest
		if ok, err := s.Get(ctx, "req."+ev.Subject(), &p); err != nil || ok {
			return err // an id is asked once
		}
		p = pendingRequest{Operation: op, Scope: scope, RunID: d.RunID}
		p.Gate.Request(&d)
		return s.Put(ctx, "req."+ev.Subject(), p)
	case events.ConfirmExpired:
		var d events.ConfirmExpiredData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return nil
		}
		var p pendingRequest
		ok, err := s.Get(ctx, "req."+ev.Subject(), &p)
		if err != nil || !ok || p.Gate.Expired {
			return err
		}
		p.Gate.Expire(&d)
		return s.Put(ctx, "req."+ev.Subject(), p)
	case events.ConfirmAnswered:
		var a events.ConfirmAnsweredData
		if err := json.Unmarshal(ev.Data(), &a); err != nil {
			return nil
		}
		var p pendingRequest
		ok, err := s.Get(ctx, "req."+ev.Subject(), &p)
		if err != nil || !ok || p.Closed {
			return err // before its request, or after the answer that took effect
		}
		if !p.Gate.Requested && p.Operation != "" {
			// Kept before the learner kept a gate: the request came first,
			// its options are unknown here.
			p.Gate.Requested, p.Gate.AnyChoice = true, true
		}
		if p.Gate.Answer(ev.ID(), &a, ev.Time(), 0) != nil {
			return nil // refused: only the answer that took effect counts
		}
		if p.Gate.Open() {
			// A vote towards the quorum: kept, counted once the quorum
			// decides.
			return s.Put(ctx, "req."+ev.Subject(), p)
		}
		if !countsAsDecision(a.Method) {
			// Only a person's answer is a decision, as for escalations: a
			// deadline's default is nobody's, a learned preference's or the
			// cache's would feed itself, --yes skips the question, an agent
			// decides for itself, and an error answer (the question could
			// not be asked, or its run ended first) decides nothing.
			return s.Put(ctx, "req."+ev.Subject(), pendingRequest{Closed: true})
		}
		key := readmodel.DecisionKey(p.Operation, p.Scope)
		var dec readmodel.Decision
		if _, err := s.Get(ctx, key, &dec); err != nil {
			return err
		}
		dec.Operation, dec.Scope = p.Operation, p.Scope
		dec.Count++
		approved := !isDeny(a.Choice)
		if approved {
			dec.Approved++
			dec.Suspended, dec.SuspendedAt = false, time.Time{} // a person approved again
		} else {
			dec.Denied++
		}
		score(&dec)
		// The request's key is closed last: a redelivery after a crash
		// between these writes finds it open and makes the rest again
		// (each key skips an event it already has). Closed first, the
		// redelivery would stop at it and the run's outcome never count.
		if err := s.Put(ctx, key, dec); err != nil {
			return err
		}
		if approved && p.RunID != "" {
			var rd runDecisions
			if _, err := s.Get(ctx, "run."+p.RunID, &rd); err != nil {
				return err
			}
			rd.Keys = append(rd.Keys, key)
			if err := s.Put(ctx, "run."+p.RunID, rd); err != nil {
				return err
			}
		}
		return s.Put(ctx, "req."+ev.Subject(), pendingRequest{Closed: true})
	case events.RunCompleted, events.RunFailed:
		var rd runDecisions
		ok, err := s.Get(ctx, "run."+ev.Subject(), &rd)
		if err != nil || !ok {
			return err
		}
		for _, key := range rd.Keys {
			var dec readmodel.Decision
			if _, err := s.Get(ctx, key, &dec); err != nil {
				return err
			}
			if events.Type(ev.Type()) == events.RunCompleted {
				dec.Successes++
			} else {
				fail(&dec, ev.Time())
			}
			score(&dec)
			if err := s.Put(ctx, key, dec); err != nil {
				return err
			}
		}
		return s.Delete(ctx, "run."+ev.Subject())
	case events.RunCancelled, events.RunAbandoned:
		// An end that is no outcome of what was approved: the run's
		// approvals wait for nothing more.
		return s.Delete(ctx, "run."+ev.Subject())
	case events.EscalationDecided:
		return escDecided(ctx, s, ev)
	case events.EscalationOutcome:
		return escOutcome(ctx, s, ev)
	}
	return nil
}

// escDecided counts a person's decision of an escalation, and keeps an
// approval by a person or the cache awaiting its outcome.
func escDecided(ctx context.Context, s events.Store, ev *events.Event) error {
	var d events.EscalationDecidedData
	if json.Unmarshal(ev.Data(), &d) != nil || d.Operation == "" {
		return nil
	}
	wk := "esc." + ev.Subject()
	var done escDecision
	if ok, err := s.Get(ctx, wk, &done); err != nil || ok {
		return err // an approval awaiting its outcome is not counted twice
	}
	approved := d.Decision == events.EscalationApproved
	key := readmodel.EscalationDecisionKey(d.Operation, d.Environment, d.Scope)
	if !countsAsDecision(d.Method) && !(approved && d.Method == events.EscMethodCache) {
		return nil
	}
	var dec readmodel.Decision
	if _, err := s.Get(ctx, key, &dec); err != nil {
		return err
	}
	dec.Operation, dec.Scope, dec.Environment = d.Operation, d.Scope, d.Environment
	switch {
	case d.Method == events.EscMethodCache:
		dec.CacheApproved++
	case approved:
		dec.Count++
		dec.Approved++
		dec.Suspended, dec.SuspendedAt = false, time.Time{} // a person approved again
	default:
		dec.Count++
		dec.Denied++
	}
	score(&dec)
	if err := s.Put(ctx, key, dec); err != nil {
		return err
	}
	if !approved {
		return nil
	}
	return s.Put(ctx, wk, escDecision{Key: key})
}

// escOutcome counts the reported outcome of an approval that fed the
// cache, once; a failure suspends the record at once.
func escOutcome(ctx context.Context, s events.Store, ev *events.Event) error {
	var o events.EscalationOutcomeData
	if json.Unmarshal(ev.Data(), &o) != nil {
		return nil
	}
	wk := "esc." + ev.Subject()
	var ed escDecision
	ok, err := s.Get(ctx, wk, &ed)
	if err != nil || !ok {
		return err // not counted (a rule's approval, a denial) or already reported
	}
	var dec readmodel.Decision
	if _, err := s.Get(ctx, ed.Key, &dec); err != nil {
		return err
	}
	if o.Outcome == events.OutcomeFailure {
		fail(&dec, ev.Time())
	} else {
		dec.Successes++
	}
	score(&dec)
	if err := s.Put(ctx, ed.Key, dec); err != nil {
		return err
	}
	return s.Delete(ctx, wk) // reported once
}

// fail counts a failure and suspends the record: "a failure lowers it at
// once", whatever the success rate of a long history says.
func fail(d *readmodel.Decision, at time.Time) {
	d.Failures++
	d.Suspended, d.SuspendedAt = true, at.UTC()
}

func score(d *readmodel.Decision) {
	total := d.Successes + d.Failures
	d.SuccessRate = 1
	if total > 0 {
		d.SuccessRate = round3(float64(d.Successes) / float64(total))
	}
	// Only an operation people approve can be a candidate for auto-approval:
	// one they keep denying has no outcomes, so its success rate stays 1.
	approved := d.Count > 0 && float64(d.Approved)/float64(d.Count) > 0.9
	d.Candidate = d.Count > 3 && d.SuccessRate > 0.9 && approved && !d.Suspended
	d.ConfidenceBoost = 0
	if d.Candidate {
		d.ConfidenceBoost = round3(min(0.3, float64(d.Count)*0.05))
	}
}

func isDeny(choice string) bool {
	switch strings.ToLower(choice) {
	case "cancel", "abort", "no", "deny", "reject", "stop":
		return true
	}
	return false
}
