package runner_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSweepMovesOnRunsWhoseDeliveriesWereLost: a run whose events the
// runner's consumer acknowledged without acting on them (a delivery lost
// while NATS restarted, a duplicate acknowledged in its place) is not left
// at step.started for good: the sweep finds it from the index and makes
// the call whose result was never recorded again, with the same
// idempotency key (the tool honours it), and the run completes.
func TestSweepMovesOnRunsWhoseDeliveriesWereLost(t *testing.T) {
	h := newHarness(t)
	h.service("indexer", indexer.Run)
	src := "name: sweepy\nsteps:\n  - name: nap\n    tool: sleeper\n    args: {duration: 10ms}\n    on_error: retry\n    retry: {attempts: 2, backoff: 10ms}\n"
	sk, err := skill.Load("sweepy.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	const id = "lostrun1"
	long := time.Now().Add(-10 * time.Minute)
	put := func(typ events.Type, eventID string, data any) {
		t.Helper()
		ev, err := events.NewEvent(typ, id, eventID, runner.Source, data)
		if err != nil {
			t.Fatal(err)
		}
		ev.SetTime(long)
		if _, err := h.bus.Publish(h.ctx(), &ev); err != nil {
			t.Fatal(err)
		}
	}
	put(events.RunRequested, id+"/requested", events.RunRequestedData{Skill: events.SkillRef{Name: sk.Name, Source: sk.Source, Digest: sk.Digest}, Inputs: map[string]any{}, RequestedBy: "test"})
	put(events.RunStarted, id+"/started", events.RunStartedData{Skill: sk.Name, Driver: "runner", Steps: []string{"nap"}})
	put(events.RunStepStarted, id+"/s0/a1/started", events.StepStartedData{Step: "nap", Index: 0, Attempt: 1, Kind: "tool", Tool: "sleeper", Args: map[string]any{"duration": "10ms"}, IdempotencyKey: id + "/0/1"})

	// The runner's consumer has acknowledged all of it: nothing will be
	// delivered again.
	ctx := h.ctx()
	cons, err := h.bus.JetStream().CreateOrUpdateConsumer(ctx, events.EventStream, jetstream.ConsumerConfig{
		Durable: runner.ConsumerName, FilterSubjects: []string{"heed.run.>", "heed.confirm.*.answered"}, AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
		acked++
	}
	if acked != 3 {
		t.Fatalf("acknowledged %d events, want 3", acked)
	}
	// The index knows the run is running.
	kvCheck(t, h, "run."+id, func(status string) bool { return status == "running" })

	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1, SweepEvery: 200 * time.Millisecond, SweepQuiet: 100 * time.Millisecond})
	evs := h.waitRun(id, 20*time.Second, "run.completed", func(evs []*events.Event) bool { return len(ofType(evs, events.RunCompleted)) == 1 })
	if failed := ofType(evs, events.RunStepFailed); len(failed) != 0 {
		t.Fatalf("%d step.failed events, want none (the call made again, not failed as lost):\n%s", len(failed), describe(evs))
	}
	var results []events.StepCompletedData
	for _, ev := range ofType(evs, events.RunStepCompleted) {
		results = append(results, decode[events.StepCompletedData](t, ev))
	}
	if len(results) != 1 || results[0].Attempt != 1 {
		t.Errorf("step.completed = %+v; want attempt 1's result, from the call made again with key %s/0/1", results, id)
	}
}

// kvCheck waits until the index entry at key has a status ok accepts.
func kvCheck(t *testing.T, h *harness, key string, ok func(status string) bool) {
	t.Helper()
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		kv, err := h.bus.JetStream().KeyValue(h.ctx(), readmodel.IndexBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(h.ctx(), key)
		if err != nil {
			return err
		}
		var x readmodel.IndexEntry
		if !readmodel.Decode(e.Value(), &x) || !ok(x.Status) {
			return fmt.Errorf("index %s: %s", key, e.Value())
		}
		return nil
	})
}

// TestAbandonIdleRuns: runs with no event for the idle time end with
// heed.run.abandoned, whoever drives them (an outside agent that went
// quiet, a run the runner drives that waits for its agent); a run that
// keeps moving is left alone; an event after the end changes nothing.
func TestAbandonIdleRuns(t *testing.T) {
	h := newHarness(t)
	h.service("indexer", indexer.Run)
	const idle = 1500 * time.Millisecond
	put := func(id string, typ events.Type, eventID string, data any) {
		t.Helper()
		ev, err := events.NewEvent(typ, id, eventID, "agent/quiet", data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.bus.Publish(h.ctx(), &ev); err != nil {
			t.Fatal(err)
		}
	}
	// An outside agent's run that goes quiet in the middle of a call.
	put("quietagent", events.RunStarted, "quietagent/started", events.RunStartedData{Skill: "deploy", Driver: "agent"})
	put("quietagent", events.RunStepStarted, "quietagent/s0", events.StepStartedData{Step: "push", Index: 0, Attempt: 1, Kind: "tool", Tool: "git"})
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1, SweepEvery: 100 * time.Millisecond, AbandonAfter: idle})
	// A run the runner drives, paused at a confirmation no one answers (no
	// router runs, so no deadline either).
	paused := h.start("name: asks\nsteps:\n  - name: decide\n    confirm:\n      message: Go on?\n", nil, false)
	h.waitRun(paused, 10*time.Second, "run.paused", hasType(events.RunPaused))
	// A busy agent: an event every 300 ms for three idle times.
	busyDone := make(chan struct{})
	t.Cleanup(func() { <-busyDone }) // a Fatal below: the agent stops before the test's connection
	go func() {
		defer close(busyDone)
		for i := range 15 {
			ev, err := events.NewEvent(events.RunStepCompleted, "busyagent", fmt.Sprintf("busyagent/%d", i), "agent/busy", events.StepCompletedData{Step: "poll", Index: 0, Attempt: 1})
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := h.bus.Publish(h.ctx(), &ev); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(300 * time.Millisecond) // the agent's own pace: what is tested is that it is never idle
		}
	}()

	for _, id := range []string{"quietagent", paused} {
		evs := h.waitRun(id, 20*time.Second, "run.abandoned", hasType(events.RunAbandoned))
		ab := ofType(evs, events.RunAbandoned)
		if len(ab) != 1 || ab[0].ID() != id+"/abandoned" {
			t.Fatalf("run %s: %d abandoned events:\n%s", id, len(ab), describe(evs))
		}
		d := decode[events.RunAbandonedData](t, ab[0])
		last := evs[len(evs)-2]
		if d.LastEventID != last.ID() || d.IdleMS < float64(idle.Milliseconds()) || d.Reason == "" {
			t.Errorf("run %s: abandoned with %+v; want its last event %s and at least %s idle", id, d, last.ID(), idle)
		}
		kvCheck(t, h, "run."+id, func(status string) bool { return status == "abandoned" })
	}
	<-busyDone
	if evs := h.runLog("busyagent"); len(ofType(evs, events.RunAbandoned)) != 0 {
		t.Errorf("a run with an event every 300 ms was abandoned:\n%s", describe(evs))
	}
	// A late event for an abandoned run is kept in the log and changes
	// nothing: the index still says abandoned, and counts it.
	put("quietagent", events.RunStepCompleted, "quietagent/s0/done", events.StepCompletedData{Step: "push", Index: 0, Attempt: 1})
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		kv, err := h.bus.JetStream().KeyValue(h.ctx(), readmodel.IndexBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(h.ctx(), "run.quietagent")
		if err != nil {
			return err
		}
		var x readmodel.IndexEntry
		if !readmodel.Decode(e.Value(), &x) || x.Last.ID != "quietagent/s0/done" || x.Status != "abandoned" {
			return fmt.Errorf("index run.quietagent: %s", e.Value())
		}
		return nil
	})
}
