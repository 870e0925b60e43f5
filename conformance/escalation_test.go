package conformance

import (
	"errors"
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
