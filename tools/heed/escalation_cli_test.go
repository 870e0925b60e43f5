package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestEscalationCLI: heed escalate prints the routing and exits 0 for an
// approval; a critical request is held and heed held --check exits 3 with
// the session rule's reason; escalate --wait follows a held request to a
// person's deny (exit 3, who decided); escalation show/list/outcome read
// it back; bad input exits 2.
func TestEscalationCLI(t *testing.T) {
	t.Parallel()
	url, _ := startHeedCLI(t)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append([]string{"--nats-url", url}, args...)...)
	}
	out, errOut, code := cli("escalate", "file_edit", "--session", "agent/t", "--scope", "/tmp/x.txt", "--risk", "0.1", "--confidence", "0.9")
	for _, want := range []string{": approved", "conditional_approve (rule safe_paths)", "risk 0.10 (request)", "safeguards: log_extra, monitor"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("safe edit: exit %d, want 0 and %q\n%s%s", code, want, out, errOut)
		}
	}
	out, errOut, code = cli("escalate", "force_push", "--session", "agent/t", "--scope", "main", "--risk", "0.95", "--id", "t-esc-1", "--json")
	var reply struct {
		ID     string
		Status string
		Routed struct {
			Priority int
			Tier     string
			Critical bool
		}
		Offer struct {
			ConfirmID string `json:"confirm_id"`
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &reply) != nil || reply.Status != "held" || reply.Routed.Priority != 10 || reply.Routed.Tier != "top" || !reply.Routed.Critical || reply.Offer.ConfirmID != "t-esc-1-o1" {
		t.Fatalf("force push: exit %d, want held at the top tier, priority 10\n%s%s", code, out, errOut)
	}
	out, errOut, code = cli("held", "agent/t", "--check")
	if code != 3 || !strings.Contains(out, "may not start new risky work: 1 critical request(s) held (force_push)") || !strings.Contains(out, "t-esc-1") {
		t.Errorf("held --check: exit %d, want 3 with the reason and the request\n%s%s", code, out, errOut)
	}
	if out, errOut, code = cli("held", "agent/other", "--check"); code != 0 || !strings.Contains(out, "may start new risky work") {
		t.Errorf("held of a session with nothing held: exit %d, want 0\n%s%s", code, out, errOut)
	}

	// --wait follows a held request until a person decides.
	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		o, e, c := runCLI(t, "--nats-url", url, "escalate", "deploy", "--session", "agent/t", "--env", "prod", "--scope", "service:api", "--risk", "0.8", "--id", "t-esc-2", "--wait=20s")
		done <- result{o, e, c}
	}()
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if _, _, code := cli("confirm", "show", "t-esc-2-o1"); code != 0 {
			return errors.New("no offer yet")
		}
		return nil
	})
	if out, errOut, code := cli("confirm", "answer", "t-esc-2-o1", "deny", "--by", "user:alice"); code != 0 {
		t.Fatalf("deny: exit %d\n%s%s", code, out, errOut)
	}
	r := <-done
	if r.code != 3 || !strings.Contains(r.out, "→ denied by user:alice (user, tier tier2)") {
		t.Errorf("escalate --wait: exit %d, want 3 and who denied\n%s%s", r.code, r.out, r.errOut)
	}

	if out, errOut, code = cli("escalation", "outcome", "t-esc-2", "failure", "--detail", "not done"); code != 0 {
		t.Errorf("outcome: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = cli("escalation", "show", "t-esc-2")
	for _, want := range []string{"escalation t-esc-2: denied", "deploy service:api in prod, session agent/t", "offer 1: tier tier2", "→ denied by user:alice", "outcome: failure"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("show: exit %d, want %q\n%s%s", code, want, out, errOut)
		}
	}
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		out, _, _ := cli("escalation", "list", "--status", "held", "--json")
		var list []struct{ ID string }
		if json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != "t-esc-1" {
			return errors.New("list --status held: " + out)
		}
		return nil
	})
	for _, bad := range [][]string{
		{"escalate", "x", "--risk", "0.5"},
		{"escalate", "x", "--session", "s", "--risk", "2"},
		{"escalation", "outcome", "t-esc-2", "maybe"},
		{"escalation", "show", "no-such-esc"},
		{"escalation", "list", "--status", "weird"},
	} {
		if out, errOut, code := cli(bad...); code != 2 || !strings.HasPrefix(errOut, "heed: ") {
			t.Errorf("heed %s: exit %d, want 2 and one error line\n%s%s", strings.Join(bad, " "), code, out, errOut)
		}
	}
}
