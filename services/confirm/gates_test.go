package confirm

import (
	"testing"
	"time"

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

// TestGatesFollowEvictedOpenConfirmations: an open confirmation pushed
// out of the cache is still followed for its deadline: its expiry is
// known without the log, the router's own timeout answer after it is
// taken as settled, and anything that needs judging (another answer, a
// redelivery) sends the router to the log.
func TestGatesFollowEvictedOpenConfirmations(t *testing.T) {
	req := events.ConfirmRequestedData{Message: "Go?", Requester: "t", Default: "no", RunID: "run1",
		Options: []events.Option{{Label: "Yes", Value: "yes"}, {Label: "No", Value: "no"}}}
	firsts := map[string]uint64{"w1": 1, "w2": 2, "w3": 3, "w4": 4, "w5": 5}
	g := newGates(1, func(id string) (uint64, bool) { s, ok := firsts[id]; return s, ok })
	for i, id := range []string{"w1", "w2", "w3", "w4", "w5"} {
		g.observe(delivery(t, events.ConfirmRequested, id, id+"/requested", uint64(i+1), 1, req))
	}
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		v, ok := g.view(id)
		if !ok || !v.open || v.expired || v.dflt != "no" || v.runID != "run1" {
			t.Fatalf("%s evicted while open: view %+v, %v; want open, default no, run run1", id, v, ok)
		}
	}
	deadline := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	// w1: expires, then the router's default answer takes effect.
	g.observe(delivery(t, events.ConfirmExpired, "w1", "w1/expired", 10, 1, events.ConfirmExpiredData{Deadline: deadline, Default: "no", RunID: "run1"}))
	v, ok := g.view("w1")
	if !ok || !v.open || !v.expired || v.lastSeq != 10 || !v.deadline.Equal(deadline) {
		t.Fatalf("w1 after its expiry: %+v, %v", v, ok)
	}
	timeout := delivery(t, events.ConfirmAnswered, "w1", "w1/answer/timeout", 11, 1, events.ConfirmAnsweredData{Choice: "no", Method: events.MethodTimeout, By: Source, Channel: "deadline", RunID: "run1"})
	if st := g.observe(timeout); st != nil {
		t.Fatal("an evicted confirmation has no whole state")
	}
	if v, ok := g.view("w1"); !ok || v.open {
		t.Errorf("w1 after its default answer: %+v, %v; want closed", v, ok)
	}
	if g.takeSettled("w1", 12) || !g.takeSettled("w1", 11) || g.takeSettled("w1", 11) {
		t.Error("the default answer is taken once, at its own sequence")
	}
	if _, ok := g.view("w1"); ok {
		t.Error("w1 after it was taken: forgotten")
	}
	// w4: an answer the gate refuses (it names another run) is left to
	// the log, which reports the refusal.
	g.observe(delivery(t, events.ConfirmExpired, "w4", "w4/expired", 14, 1, events.ConfirmExpiredData{Deadline: deadline, Default: "no"}))
	g.observe(delivery(t, events.ConfirmAnswered, "w4", "w4/answer/timeout", 15, 1, events.ConfirmAnsweredData{Choice: "no", Method: events.MethodTimeout, By: Source, RunID: "run2"}))
	if g.takeSettled("w4", 15) {
		t.Error("a refused default answer taken as settled")
	}
	if _, ok := g.view("w4"); ok {
		t.Error("w4 after a refused answer: want the log")
	}
	// w2: a person's answer needs the whole confirmation.
	g.observe(delivery(t, events.ConfirmAnswered, "w2", "w2/a", 12, 1, events.ConfirmAnsweredData{Choice: "yes", Method: events.MethodUser, By: "u"}))
	if _, ok := g.view("w2"); ok {
		t.Error("w2 after a person's answer: want the log")
	}
	// w3: a redelivery drops it.
	g.observe(delivery(t, events.ConfirmExpired, "w3", "w3/expired", 13, 2, events.ConfirmExpiredData{Deadline: deadline, Default: "no"}))
	if _, ok := g.view("w3"); ok {
		t.Error("w3 after a redelivery: want the log")
	}
}

// TestGatesHeldBackAreNotCachedAgain: once a consumer held back an event
// of a confirmation (a lease blip), an earlier delivery still queued does
// not seed the cache, and a later one is not folded onto a state that
// misses the one held back.
func TestGatesHeldBackAreNotCachedAgain(t *testing.T) {
	req := events.ConfirmRequestedData{Message: "Go?", Requester: "t", Options: []events.Option{{Label: "Yes", Value: "yes"}, {Label: "No", Value: "no"}}}
	g := newGates(8, func(string) (uint64, bool) { return 1, true })
	g.heldBack("c1") // its answer (seq 2) was held back before the request was handled
	if st := g.observe(delivery(t, events.ConfirmRequested, "c1", "r", 1, 1, req)); st != nil {
		t.Fatal("a confirmation with an event held back was cached from its request")
	}
	if st := g.observe(delivery(t, events.ConfirmAnswered, "c1", "a2", 3, 1, events.ConfirmAnsweredData{Choice: "no", Method: events.MethodUser, By: "v"})); st != nil {
		t.Fatal("a later answer was folded onto a state missing the one held back")
	}
	if st := g.state("c1"); st != nil {
		t.Fatal("the command path judges a held-back confirmation from the cache")
	}
	// Others are cached as before.
	if st := g.observe(delivery(t, events.ConfirmRequested, "c2", "r2", 1, 1, req)); st == nil {
		t.Fatal("another confirmation is not cached")
	}
}
