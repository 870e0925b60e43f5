package conformance

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestCommandWithoutReplyIsDeadLettered: a command published with no reply
// subject (`nats pub heed.cmd.…`, a client that fires and forgets) has
// nowhere to get its error. One that fails is dead-lettered on
// heed.dlq.cmd.<command> with its code and reason; one that succeeds takes
// effect and leaves no dead letter.
func TestCommandWithoutReplyIsDeadLettered(t *testing.T) {
	h := startHeed(t)
	dead := make(chan *nats.Msg, 16)
	sub, err := h.nc.ChanSubscribe("heed.dlq.cmd.>", dead)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// A start that works, sent without a reply subject: the run starts.
	start, _ := json.Marshal(map[string]any{
		"skill":      map[string]any{"source": checkSkill, "file": "conformance.yaml"},
		"inputs":     map[string]any{"tag": fullSHA},
		"request_id": "noreply-ok",
	})
	w := watch(t, h.js, "heed.run.*.requested")
	for _, p := range []struct{ subject, body string }{
		{"heed.cmd.run.start", string(start)},
		{"heed.cmd.run.start", `{"skill": `},                                                // not JSON
		{"heed.cmd.confirm.answer", `{"confirm_id": "nosuch-s0-a1", "choice": "proceed"}`},  // no such confirmation
		{"heed.cmd.escalation.request", `{"session": "s1"}`},                                // misses required fields
		{"heed.cmd.changeset.decide", `{"id": "nosuch", "item": 1, "decision": "confirm"}`}, // schema or not_found
	} {
		if err := h.nc.Publish(p.subject, []byte(p.body)); err != nil {
			t.Fatal(err)
		}
	}
	w.waitFor(30*time.Second, "the run started without a reply subject", func(e event) bool { return true })

	want := map[string]string{
		"heed.cmd.run.start":          "invalid_request",
		"heed.cmd.confirm.answer":     "",
		"heed.cmd.escalation.request": "invalid_request",
		"heed.cmd.changeset.decide":   "",
	}
	got := map[string]*nats.Msg{}
	deadline := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case m := <-dead:
			orig := m.Header.Get("Heed-Dlq-Subject")
			if _, dup := got[orig]; dup {
				t.Fatalf("two dead letters for %s: %s and then %s", orig, got[orig].Header.Get("Heed-Dlq-Reason"), m.Header.Get("Heed-Dlq-Reason"))
			}
			got[orig] = m
		case <-deadline:
			t.Fatalf("dead letters after 30s: %d of %d (%v)", len(got), len(want), keys(got))
		}
	}
	for subject, code := range want {
		m := got[subject]
		if m == nil {
			t.Fatalf("no dead letter for %s (got %v)", subject, keys(got))
		}
		if m.Subject != "heed.dlq."+strings.TrimPrefix(subject, "heed.") {
			t.Errorf("dead letter of %s on %s", subject, m.Subject)
		}
		if code != "" && m.Header.Get("Heed-Dlq-Code") != code {
			t.Errorf("dead letter of %s: code %q, want %q (reason %q)", subject, m.Header.Get("Heed-Dlq-Code"), code, m.Header.Get("Heed-Dlq-Reason"))
		}
		if m.Header.Get("Heed-Dlq-Code") == "" || !strings.Contains(m.Header.Get("Heed-Dlq-Reason"), "without a reply subject") {
			t.Errorf("dead letter of %s: code %q reason %q", subject, m.Header.Get("Heed-Dlq-Code"), m.Header.Get("Heed-Dlq-Reason"))
		}
		if m.Header.Get("Heed-Dlq-Seq") != "" {
			t.Errorf("dead letter of a command names a stream position: %v", m.Header)
		}
	}
	// The good start left none, and the dead letters are stored, not only
	// sent: the dead-letter stream holds the four.
	select {
	case m := <-dead:
		t.Fatalf("a fifth dead letter: %s %s", m.Header.Get("Heed-Dlq-Subject"), m.Header.Get("Heed-Dlq-Reason"))
	case <-time.After(500 * time.Millisecond):
	}
	s, err := h.js.Stream(ctxFor(t, 10*time.Second), "HEED_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 4 {
		t.Fatalf("HEED_DLQ holds %d messages, want the 4 dead letters", n)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
