package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDrivenIDsLeavesOutRunsHandledLately: the sweep and the abandon check
// read only the driven runs this process has not handled an event of since
// the quiet limit (cached or parked), and a run it never handled (parked
// after a restart, forgotten) is always read.
func TestDrivenIDsLeavesOutRunsHandledLately(t *testing.T) {
	e := &engine{runs: map[string]*runstate.Run{}, parked: map[string]waitingRun{}, handled: map[string]time.Time{}}
	now := time.Now()
	e.runs["busy"], e.runs["quiet"], e.runs["unseen"] = runstate.New("busy"), runstate.New("quiet"), runstate.New("unseen")
	e.parked["parkedbusy"], e.parked["parkedquiet"] = waitingRun{confirmID: "c1"}, waitingRun{confirmID: "c2"}
	e.touch("busy", now.Add(-time.Second))
	e.touch("parkedbusy", now.Add(-time.Second))
	e.touch("quiet", now.Add(-time.Minute))
	e.touch("parkedquiet", now.Add(-time.Minute))
	got := slices.Sorted(maps.Keys(e.drivenIDs(now.Add(-30 * time.Second))))
	want := []string{"parkedquiet", "quiet", "unseen"}
	if !slices.Equal(got, want) {
		t.Fatalf("drivenIDs = %v, want %v", got, want)
	}
	e.forget("busy") // the sweep wrote to it: its cached state is behind
	e.runs["busy"] = runstate.New("busy")
	if _, ok := e.drivenIDs(now.Add(-30 * time.Second))["busy"]; !ok {
		t.Fatal("a forgotten run, cached again, is read by the next sweep")
	}
}

// TestSweepAsksForAnswersInBatches: which of 600 confirmations have an
// answer in the log is read in batches (256 subjects a request) and comes
// out exact, with none answered in a batch too.
func TestSweepAsksForAnswersInBatches(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cids []string
	want := map[string]bool{}
	for i := range 600 {
		cid := fmt.Sprintf("look%03d-s0-a1", i)
		cids = append(cids, cid)
		if i%2 == 0 && i < 500 { // the last batch has none answered
			ev, err := events.NewEvent(events.ConfirmAnswered, cid, cid+"/answer", Source, events.ConfirmAnsweredData{Choice: "yes", Method: "user", By: "user:t"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bus.PublishAsync(&ev); err != nil {
				t.Fatal(err)
			}
			want[cid] = true
		}
	}
	select {
	case <-bus.JetStream().PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publish")
	}
	e := newEngine(bus, &tool.Invoker{Registry: &tool.Registry{}}, eventstest.Logger(t), 5*time.Second)
	got, err := e.answered(ctx, cids)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("answered: %d found, want %d", len(got), len(want))
	}
}

// TestSweepOfAParkedRunReadsItsAnswers: a parked run (its state out of the
// cache) waiting for a confirmation is passed by while no answer is in the
// log, and moved on by the sweep once one is, though its delivery was lost.
func TestSweepOfAParkedRunReadsItsAnswers(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := "name: asky\nsteps:\n  - name: approve\n    confirm:\n      message: Go?\n      options:\n        - {label: Yes, value: yes}\n        - {label: No, value: no}\n  - name: sum\n    compute: \"1 + 1\"\n"
	sk, err := skill.Load("asky.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	const id = "parkedrun1"
	cid := ConfirmID(id, 0, 1)
	long := time.Now().Add(-10 * time.Minute)
	put := func(typ events.Type, subject, eventID string, data any) {
		t.Helper()
		ev, err := events.NewEvent(typ, subject, eventID, Source, data)
		if err != nil {
			t.Fatal(err)
		}
		ev.SetTime(long)
		if _, err := bus.Publish(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	zero := 0
	put(events.RunRequested, id, id+"/requested", events.RunRequestedData{Skill: events.SkillRef{Name: sk.Name, Source: sk.Source, Digest: sk.Digest}, Inputs: map[string]any{}, RequestedBy: "test"})
	put(events.RunStarted, id, id+"/started", events.RunStartedData{Skill: sk.Name, Driver: "runner", Steps: []string{"approve", "sum"}})
	put(events.RunStepStarted, id, id+"/s0/a1/started", events.StepStartedData{Step: "approve", Index: 0, Attempt: 1, Kind: "confirm"})
	c := sk.Steps[0].Confirm // the request as the runner writes it (its terms are checked)
	put(events.ConfirmRequested, cid, cid+"/requested", events.ConfirmRequestedData{Message: "Go?", Options: []events.Option{{Label: "Yes", Value: "yes"}, {Label: "No", Value: "no"}}, Default: c.Default, TimeoutS: c.Timeout.Seconds(), Requester: Source, RunID: id, Skill: sk.Name, Step: "approve", Index: &zero})
	put(events.RunPaused, id, id+"/s0/paused", events.RunPausedData{Reason: events.PauseAwaitingConfirmation, Step: "approve", Index: 0, ConfirmID: cid})

	e := newEngine(bus, &tool.Invoker{Registry: &tool.Registry{}}, eventstest.Logger(t), 5*time.Second)
	e.parked[id] = waitingRun{confirmID: cid}
	if n, err := e.sweep(ctx, time.Second, false); err != nil || n != 0 {
		t.Fatalf("sweep without an answer moved %d runs (err %v)", n, err)
	}
	put(events.ConfirmAnswered, cid, cid+"/answer1", events.ConfirmAnsweredData{Choice: "yes", Method: "user", By: "user:test", RunID: id})
	if n, err := e.sweep(ctx, time.Second, false); err != nil || n != 1 {
		t.Fatalf("sweep with an answer moved %d runs (err %v), want 1", n, err)
	}
	r, err := runstate.Load(ctx, bus, id, e.skills)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, events.SubjectFilter("run", id), 0, func(raw events.RawMsg) error {
		types = append(types, raw.Subject)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(types, "heed.run."+id+".resumed") || !r.Terminal() {
		t.Fatalf("the sweep did not resume the answered run: %v", types)
	}
}

// TestFirstSweepReadsOnlyUnseenRuns: the first sweep adds the runs the
// index says are not over and this process has never seen; the runs it
// handled lately, cached or finished are not read (a busy runner's first
// sweep read every run it had just opened).
func TestFirstSweepReadsOnlyUnseenRuns(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := bus.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: readmodel.IndexBucket})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"busy", "quiet", "parked", "ended", "unseen", "agents"} {
		driver := "runner"
		if id == "agents" {
			driver = "agent"
		}
		v := fmt.Sprintf(`{"value":{"id":%q,"kind":"run","status":"paused","driver":%q}}`, id, driver)
		if _, err := kv.Put(ctx, readmodel.IndexKey("run", id), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	e := newEngine(bus, &tool.Invoker{Registry: &tool.Registry{}}, eventstest.Logger(t), 5*time.Second)
	now := time.Now()
	e.runs["busy"], e.runs["quiet"] = runstate.New("busy"), runstate.New("quiet")
	e.touch("busy", now)
	e.touch("quiet", now.Add(-time.Minute))
	e.parked["parked"] = waitingRun{confirmID: "parked-s0-a1"}
	e.touch("parked", now)
	e.done(runstate.New("ended"))
	ids := e.drivenIDs(now.Add(-30 * time.Second))
	if err := e.activeFromIndex(ctx, ids); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(ids))
	if want := []string{"quiet", "unseen"}; !slices.Equal(got, want) {
		t.Fatalf("runs the first sweep reads: %v, want %v", got, want)
	}
}
