package confirm

import (
	"testing"

	"github.com/heedhq/heed/events"
)

func delivery(t *testing.T, typ events.Type, id, eventID string, seq, delivered uint64, data any) *events.Delivery {
	t.Helper()
	ev, err := events.NewEvent(typ, id, eventID, "test", data)
	if err != nil {
		t.Fatal(err)
	}
	return &events.Delivery{Event: &ev, Seq: seq, Delivered: delivered}
}

// TestGatesKeepOnlyWholeConfirmations: the cache answers only for a
// confirmation it saw from its request on, in order, each event delivered
// once; anything else sends the judge to the log.
func TestGatesKeepOnlyWholeConfirmations(t *testing.T) {
	req := events.ConfirmRequestedData{Message: "Go?", Requester: "t", Options: []events.Option{{Label: "Yes", Value: "yes"}, {Label: "No", Value: "no"}}}
	ans := func(choice string) events.ConfirmAnsweredData {
		return events.ConfirmAnsweredData{Choice: choice, Method: events.MethodUser, By: "u"}
	}
	firsts := map[string]uint64{"c1": 2, "c2": 6, "c3": 10, "c4": 11, "c5": 12, "c6": 30}
	g := newGates(2, func(id string) (uint64, bool) { s, ok := firsts[id]; return s, ok })
	if st := g.observe(delivery(t, events.ConfirmAnswered, "c1", "a0", 1, 1, ans("yes"))); st != nil {
		t.Error("an answer of a confirmation never seen whole: want the log")
	}
	if st := g.observe(delivery(t, events.ConfirmRequested, "c1", "r", 2, 1, req)); st == nil {
		t.Fatal("the request starts a whole confirmation")
	}
	st := g.observe(delivery(t, events.ConfirmAnswered, "c1", "a1", 3, 1, ans("yes")))
	if st == nil || st.AnswerID != "a1" {
		t.Fatalf("after the first valid answer: %+v", st)
	}
	if st := g.observe(delivery(t, events.ConfirmAnswered, "c1", "a2", 4, 1, ans("no"))); st == nil || st.AnswerID != "a1" {
		t.Fatalf("a later answer is judged against the first: %+v", st)
	}
	// A redelivery means the consumer may have moved past an event: gone.
	if st := g.observe(delivery(t, events.ConfirmAnswered, "c1", "a2", 4, 2, ans("no"))); st != nil {
		t.Error("a redelivered event: want the log")
	}
	if st := g.observe(delivery(t, events.ConfirmAnswered, "c1", "a3", 5, 1, ans("no"))); st != nil {
		t.Error("after a redelivery the confirmation is no longer whole: want the log")
	}
	// A redelivered request does not start a whole confirmation either.
	if st := g.observe(delivery(t, events.ConfirmRequested, "c2", "r", 6, 2, req)); st != nil {
		t.Error("a redelivered request: want the log")
	}
	// A second request of a confirmation starts nothing.
	if st := g.observe(delivery(t, events.ConfirmRequested, "c6", "r2", 31, 1, req)); st != nil {
		t.Error("a request that is not the confirmation's first message: want the log")
	}
	// Bounded: the oldest state goes first.
	for i, id := range []string{"c3", "c4", "c5"} {
		g.observe(delivery(t, events.ConfirmRequested, id, "r", uint64(10+i), 1, req))
	}
	if st := g.observe(delivery(t, events.ConfirmAnswered, "c3", "x", 20, 1, ans("yes"))); st != nil {
		t.Error("an evicted confirmation: want the log")
	}
	if st := g.observe(delivery(t, events.ConfirmAnswered, "c5", "x", 21, 1, ans("yes"))); st == nil {
		t.Error("a kept confirmation: want the cache")
	}
}
