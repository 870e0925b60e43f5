package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestEscalationFromOutside: any client asks for permission with a plain
// NATS request (heed.cmd.escalation.request), is answered at once (held,
// never blocked), reads the routing and the offer in the log, asks whether
// its session may go on (heed.cmd.escalation.held), and gets a clear error
// for bad input.
func TestEscalationFromOutside(t *testing.T) {
	h := startHeed(t)
	w := watch(t, h.js, "heed.escalation.>", "heed.confirm.>")
	var r struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Routed struct {
			Decision string  `json:"decision"`
			Tier     string  `json:"tier"`
			Priority int     `json:"priority"`
			Risk     float64 `json:"risk"`
			Reason   string  `json:"reason"`
		} `json:"routed"`
		Offer struct {
			Tier      string `json:"tier"`
			ConfirmID string `json:"confirm_id"`
		} `json:"offer"`
	}
	mustRequest(t, h.nc, "heed.cmd.escalation.request", map[string]any{"id": "conf-esc-1", "session": "agent/conformance", "operation": "force_push", "scope": "main", "risk": 0.95}, &r)
	if r.ID != "conf-esc-1" || r.Status != "held" || r.Routed.Decision != "escalate" || r.Routed.Tier != "top" || r.Routed.Priority != 10 || r.Offer.ConfirmID != "conf-esc-1-o1" {
		t.Fatalf("reply %+v", r)
	}
	w.waitSubject(10*time.Second, "heed.escalation.conf-esc-1.requested")
	routed := w.waitSubject(10*time.Second, "heed.escalation.conf-esc-1.routed")
	var d struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}
	routed.decode(t, &d)
	if d.Decision != "escalate" || d.Reason == "" {
		t.Errorf("routed %+v", d)
	}
	w.waitSubject(10*time.Second, "heed.escalation.conf-esc-1.offered")
	w.waitSubject(10*time.Second, "heed.confirm.conf-esc-1-o1.requested")

	var held struct {
		Session     string `json:"session"`
		Held        int    `json:"held"`
		Critical    int    `json:"critical"`
		CanContinue bool   `json:"can_continue"`
		Reason      string `json:"reason"`
	}
	mustRequest(t, h.nc, "heed.cmd.escalation.held", map[string]any{"session": "agent/conformance"}, &held)
	if held.Held != 1 || held.Critical != 1 || held.CanContinue {
		t.Errorf("held %+v", held)
	}
	// A person of the (open) top tier denies; the agent sees the decision.
	mustRequest(t, h.nc, "heed.cmd.confirm.answer", map[string]any{"id": "conf-esc-1-o1", "choice": "deny", "by": "user:conformance", "channel": "cli"}, nil)
	dec := w.waitSubject(10*time.Second, "heed.escalation.conf-esc-1.decided")
	var dd struct {
		Decision string `json:"decision"`
		By       string `json:"by"`
		Method   string `json:"method"`
	}
	dec.decode(t, &dd)
	if dd.Decision != "denied" || dd.By != "user:conformance" || dd.Method != "user" {
		t.Errorf("decided %+v", dd)
	}
	// Bad input: a clear error with a stable code.
	err := request(h.nc, "heed.cmd.escalation.request", map[string]any{"session": "agent/conformance"}, nil)
	var ce *cmdError
	if !errors.As(err, &ce) || ce.Code != "invalid_request" {
		t.Errorf("a request without operation: %v; want invalid_request", err)
	}
	err = request(h.nc, "heed.cmd.escalation.status", map[string]any{"id": "no-such-esc"}, nil)
	if !errors.As(err, &ce) || ce.Code != "not_found" {
		t.Errorf("status of an unknown escalation: %v; want not_found", err)
	}
}

// TestEscalationEnvironmentFromOutside: a plain client asks with an
// environment (and, once, no scope), a person approves, the agent reports
// the outcome; the decided and outcome events carry the environment, and
// the learned record is the environment's own (a key NATS takes even for
// no scope), read straight from the bucket.
func TestEscalationEnvironmentFromOutside(t *testing.T) {
	h := startHeed(t)
	w := watch(t, h.js, "heed.escalation.>")
	for _, c := range []struct{ id, scope, key string }{
		{"conf-env-1", "service:api", "op.deploy.prod.service=3Aapi"}, // one to one: ":" is =3A
		{"conf-env-2", "", "op.deploy.prod._"},
	} {
		var r struct {
			Status string `json:"status"`
			Offer  struct {
				ConfirmID string `json:"confirm_id"`
			} `json:"offer"`
		}
		mustRequest(t, h.nc, "heed.cmd.escalation.request", map[string]any{"id": c.id, "session": "agent/conformance", "operation": "deploy", "scope": c.scope, "environment": "prod", "risk": 0.8}, &r)
		if r.Status != "held" || r.Offer.ConfirmID == "" {
			t.Fatalf("%s: reply %+v", c.id, r)
		}
		mustRequest(t, h.nc, "heed.cmd.confirm.answer", map[string]any{"id": r.Offer.ConfirmID, "choice": "approve", "by": "user:conformance", "channel": "cli"}, nil)
		var decided struct {
			Decision    string `json:"decision"`
			Environment string `json:"environment"`
		}
		w.waitSubject(10*time.Second, "heed.escalation."+c.id+".decided").decode(t, &decided)
		if decided.Decision != "approved" || decided.Environment != "prod" {
			t.Fatalf("%s: decided %+v", c.id, decided)
		}
		mustRequest(t, h.nc, "heed.cmd.escalation.outcome", map[string]any{"id": c.id, "outcome": "success", "by": "agent/conformance"}, nil)
		var outcome struct {
			Environment string `json:"environment"`
		}
		w.waitSubject(10*time.Second, "heed.escalation."+c.id+".outcome").decode(t, &outcome)
		if outcome.Environment != "prod" {
			t.Errorf("%s: outcome %+v", c.id, outcome)
		}
		kv, err := h.js.KeyValue(ctxFor(t, 5*time.Second), "heed_decisions")
		if err != nil {
			t.Fatal(err)
		}
		checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			e, err := kv.Get(ctxFor(t, 5*time.Second), c.key)
			if err != nil {
				return fmt.Errorf("%s: %w", c.key, err)
			}
			var env struct {
				Value struct {
					Operation   string `json:"operation"`
					Environment string `json:"environment"`
					Count       int    `json:"count"`
					Successes   int    `json:"successes"`
				} `json:"value"`
			}
			if err := json.Unmarshal(e.Value(), &env); err != nil {
				return err
			}
			if env.Value.Environment != "prod" || env.Value.Count != 1 || env.Value.Successes != 1 {
				return fmt.Errorf("%s: %s", c.key, e.Value())
			}
			return nil
		})
	}
	// Nothing of it went to the dead letters.
	dlq, err := h.js.Stream(ctxFor(t, 5*time.Second), "HEED_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d dead letters", info.State.Msgs)
	}
}
