package learner

import (
	"context"
	"encoding/json"
	"strings"

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
	return []string{"heed.confirm.*.requested", "heed.confirm.*.expired", "heed.confirm.*.answered", "heed.run.*.completed", "heed.run.*.failed"}
}

// Apply folds one event into the cache.
func (DecisionsProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	switch events.Type(ev.Type()) {
	case events.ConfirmRequested:
		var d events.ConfirmRequestedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return nil
		}
		op := d.Skill + "/" + d.Step
		if d.Skill == "" {
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
		} else {
			dec.Denied++
		}
		score(&dec)
		if err := s.Put(ctx, key, dec); err != nil {
			return err
		}
		if err := s.Put(ctx, "req."+ev.Subject(), pendingRequest{Closed: true}); err != nil {
			return err
		}
		if approved && p.RunID != "" {
			var rd runDecisions
			if _, err := s.Get(ctx, "run."+p.RunID, &rd); err != nil {
				return err
			}
			rd.Keys = append(rd.Keys, key)
			return s.Put(ctx, "run."+p.RunID, rd)
		}
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
				dec.Failures++
			}
			score(&dec)
			if err := s.Put(ctx, key, dec); err != nil {
				return err
			}
		}
		return s.Delete(ctx, "run."+ev.Subject())
	}
	return nil
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
	d.Candidate = d.Count > 3 && d.SuccessRate > 0.9 && approved
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
