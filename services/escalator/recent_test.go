package escalator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
)

func TestRecentSetForgetsTheOldest(t *testing.T) {
	s := newRecentSet(3)
	for i := range 4 {
		s.add(fmt.Sprint(i), i)
	}
	s.add("3", 1) // again: not a new slot, and the larger number stays
	if s.has("0") {
		t.Error("the oldest of 4 in a set of 3 is still there")
	}
	for _, id := range []string{"1", "2", "3"} {
		if !s.has(id) {
			t.Errorf("%s forgotten", id)
		}
	}
	if n, _ := s.get("3"); n != 3 {
		t.Errorf("3 has %d, want 3 (the larger)", n)
	}
	s.add("4", 4)
	if s.has("1") || !s.has("2") || !s.has("4") {
		t.Errorf("after a fifth: 1 %v, 2 %v, 4 %v; want false, true, true", s.has("1"), s.has("2"), s.has("4"))
	}
}

// A retry's read goes on until the escalation has got as far as this
// process saw it get (a replica behind the log answers with less), and
// takes what it has after readAtLeastFor.
func TestReadAtLeastWaitsForWhatThisProcessWrote(t *testing.T) {
	routed := &command.EscalationState{ID: "e", Status: events.EscalationHeld, Routed: &events.EscalationRoutedData{Decision: "escalate", Tier: "t1"}}
	offered := *routed
	offered.Offers = []events.EscalationOfferedData{{Tier: "t1", ConfirmID: "e-o1"}}
	want := progressOfState(&offered)
	if progressOfState(routed) >= want {
		t.Fatalf("routed (%d) is not behind offered (%d)", progressOfState(routed), want)
	}
	reads := 0
	st, err := readAtLeast(context.Background(), want, func() (*command.EscalationState, error) {
		reads++
		if reads < 3 {
			return routed, nil // a replica behind the log
		}
		return &offered, nil
	})
	if err != nil || st != &offered || reads != 3 {
		t.Errorf("read %d times, got %+v, %v; want the offered state on the third read", reads, st, err)
	}
	start := time.Now()
	st, err = readAtLeast(context.Background(), want, func() (*command.EscalationState, error) { return routed, nil })
	if err != nil || st != routed || time.Since(start) < readAtLeastFor {
		t.Errorf("never as far: got %+v, %v after %s; want the routed state after %s", st, err, time.Since(start), readAtLeastFor)
	}
	decided := offered
	decided.Decided = &events.EscalationDecidedData{Decision: events.EscalationApproved}
	if progressOfState(&decided) <= want {
		t.Error("a decided escalation is not past an offered one")
	}
}
