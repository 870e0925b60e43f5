package escalator

import (
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
