package escalator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events/command"
)

// BenchmarkHeldQuery: the held command's answer from memory, with 10,000
// held requests over 1,000 sessions (the issue asks under a millisecond).
func BenchmarkHeldQuery(b *testing.B) {
	h := newHeldIndex(3)
	at := time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)
	for i := range 10_000 {
		s := fmt.Sprintf("agent/s%d", i%1000)
		h.put(fmt.Sprintf("e%d", i), s, true, 1, command.HeldEscalation{ID: fmt.Sprintf("e%d", i), Operation: "deploy", Risk: 0.6, Since: at.Add(time.Duration(i) * time.Second), Critical: i%97 == 0})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := h.query(fmt.Sprintf("agent/s%d", i%1000))
		if r.Held != 10 {
			b.Fatalf("held %d", r.Held)
		}
	}
}

func TestHeldRuleUnit(t *testing.T) {
	h := newHeldIndex(3)
	for i := range 3 {
		h.put(fmt.Sprint("e", i), "s", true, 1, command.HeldEscalation{ID: fmt.Sprint("e", i)})
	}
	if r := h.query("s"); !r.CanContinue || r.Held != 3 {
		t.Errorf("3 held: %+v", r)
	}
	h.put("e3", "s", true, 6, command.HeldEscalation{ID: "e3", Critical: true})
	h.put("e3", "s", true, 0, command.HeldEscalation{ID: "e3"}) // the projector, behind: the later state stands
	if r := h.query("s"); r.Critical != 1 {
		t.Errorf("a late summary took back a state: %+v", r)
	}
	if r := h.query("s"); r.CanContinue || !strings.Contains(r.Reason, "critical") {
		t.Errorf("4 held: %+v", r)
	}
	h.put("e4", "s", true, 1, command.HeldEscalation{ID: "e4"})
	h.put("e4", "s", false, 0, command.HeldEscalation{})
	h.put("e4", "s", true, 99, command.HeldEscalation{ID: "e4"}) // a late projection of an older event: the decision stands
	if r := h.query("s"); r.Held != 4 {
		t.Errorf("a decided request came back: %+v", r)
	}
}

// TestHeldReplyStaysSmall: 10,000 held requests in one session, and 10,000
// sessions holding one or two each, answer within NATS's 1 MB message
// limit (heed held with no session once never replied with 10,000 held).
func TestHeldReplyStaysSmall(t *testing.T) {
	at := time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)
	one := newHeldIndex(3)
	many := newHeldIndex(3)
	for i := range 10_000 {
		he := command.HeldEscalation{ID: fmt.Sprintf("e%05d", i), Operation: fmt.Sprintf("op%d", i%50), Scope: strings.Repeat("s", 100), Risk: 0.95, Critical: true, Since: at.Add(time.Duration(i) * time.Second)}
		one.put(he.ID, "agent/one", true, 1, he)
		many.put(he.ID, fmt.Sprintf("agent/s%05d", i%(10_000-i%2)), true, 1, he)
	}
	r := one.query("agent/one")
	if r.Held != 10_000 || len(r.Requests) != command.HeldRequestsLimit || r.More != 10_000-command.HeldRequestsLimit || r.Requests[0].ID != "e00000" {
		t.Errorf("one session: held %d, listed %d (first %s), more %d", r.Held, len(r.Requests), r.Requests[0].ID, r.More)
	}
	if !strings.Contains(r.Reason, "10000 critical request(s) held (op0, op1, op10, op11, op12, 45 more)") {
		t.Errorf("reason: %s", r.Reason)
	}
	all := many.query("")
	if all.Held != 10_000 || len(all.Sessions) != command.HeldSessionsLimit || all.MoreSessions == 0 || all.Sessions[0].Held < all.Sessions[len(all.Sessions)-1].Held {
		t.Errorf("every session: held %d, listed %d, more %d", all.Held, len(all.Sessions), all.MoreSessions)
	}
	for _, rep := range []any{r, all} {
		b, _ := json.Marshal(rep)
		if len(b) > 512<<10 {
			t.Errorf("a held reply of %d bytes", len(b))
		}
	}
}

// TestHeldIndexForgetsOldDecisions: decided escalations are remembered for
// one to two generations (a late summary of the projector cannot bring
// them back meanwhile), then forgotten, so the index does not grow with
// every escalation ever decided.
func TestHeldIndexForgetsOldDecisions(t *testing.T) {
	h := newHeldIndex(3)
	he := command.HeldEscalation{ID: "e1"}
	h.put("e1", "s", true, 1, he)
	h.put("e1", "s", false, 9, command.HeldEscalation{})
	h.put("e1", "s", true, 1, he) // a late summary
	if r := h.query("s"); r.Held != 0 {
		t.Fatalf("a late summary brought back a decided escalation: %+v", r)
	}
	for gen := range 2 {
		h.doneSince = time.Now().Add(-2 * doneFor)
		h.put(fmt.Sprint("x", gen), "s", false, 9, command.HeldEscalation{})
	}
	if h.done["e1"] || h.doneBefore["e1"] {
		t.Errorf("e1 still remembered after two generations")
	}
	if !h.doneBefore["x0"] || !h.done["x1"] {
		t.Errorf("the latest decisions are forgotten: done %v, before %v", h.done, h.doneBefore)
	}
}
