package runstate_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
)

var t0 = time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)

func ev(t *testing.T, typ events.Type, id string, data any) *events.Event {
	t.Helper()
	e, err := events.NewEvent(typ, "r1", id, "test", data)
	if err != nil {
		t.Fatal(err)
	}
	e.SetTime(t0)
	return &e
}

func apply(t *testing.T, r *runstate.Run, evs ...*events.Event) {
	t.Helper()
	for _, e := range evs {
		if err := r.Apply(e, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNextStatus(t *testing.T) {
	for _, tc := range []struct {
		cur  string
		t    events.Type
		want string
	}{
		{"", events.RunRequested, runstate.StatusRequested},
		{runstate.StatusRequested, events.RunStarted, runstate.StatusRunning},
		{runstate.StatusRunning, events.RunPaused, runstate.StatusPaused},
		{runstate.StatusPaused, events.RunResumed, runstate.StatusRunning},
		{runstate.StatusPaused, events.RunStepStarted, runstate.StatusRunning},
		{runstate.StatusRequested, events.RunResumed, runstate.StatusRequested},
		{runstate.StatusRunning, events.RunFailed, runstate.StatusFailed},
		{runstate.StatusFailed, events.RunResumed, runstate.StatusRunning},     // a retry reopens it
		{runstate.StatusFailed, events.RunStepStarted, runstate.StatusRunning}, // an agent's own retry
		{runstate.StatusFailed, events.RunCompleted, runstate.StatusFailed},
		{runstate.StatusFailed, events.RunPaused, runstate.StatusFailed},
		{runstate.StatusCompleted, events.RunResumed, runstate.StatusCompleted},
		{runstate.StatusCancelled, events.RunStepStarted, runstate.StatusCancelled},
		{runstate.StatusRunning, events.RunAbandoned, runstate.StatusAbandoned},
		{runstate.StatusPaused, events.RunAbandoned, runstate.StatusAbandoned},
		{runstate.StatusAbandoned, events.RunStepStarted, runstate.StatusAbandoned}, // a late event changes nothing
		{runstate.StatusAbandoned, events.RunResumed, runstate.StatusAbandoned},
		{runstate.StatusAbandoned, events.RunCompleted, runstate.StatusAbandoned},
		{"", events.RunStepFailed, runstate.StatusRunning}, // an agent's run may begin anywhere
		{runstate.StatusRunning, events.RunStepFailed, runstate.StatusRunning},
	} {
		if got := runstate.NextStatus(tc.cur, tc.t); got != tc.want {
			t.Errorf("NextStatus(%q, %s) = %q, want %q", tc.cur, tc.t, got, tc.want)
		}
	}
}

func TestHealVerdictFirstWins(t *testing.T) {
	r := runstate.New("r1")
	failed := events.StepFailedData{Step: "deploy", Index: 0, Attempt: 1, Tool: "t", Error: events.ErrorInfo{Message: "boom"}}
	apply(t, r,
		ev(t, events.RunStepStarted, "s", events.StepStartedData{Step: "deploy", Index: 0, Attempt: 1, Kind: "tool", Tool: "t"}),
		// A heal event about an attempt that has not failed is about nothing.
		ev(t, events.HealGaveUp, "early", events.HealGaveUpData{Step: "deploy", Index: 0, Attempt: 1, Reason: "too early"}),
		ev(t, events.RunStepFailed, "f", failed),
		ev(t, events.HealRetried, "retried", events.HealRetriedData{Step: "deploy", Index: 0, Attempt: 1, NextAttempt: 2, Args: map[string]any{"x": 1}}),
		ev(t, events.HealGaveUp, "late", events.HealGaveUpData{Step: "deploy", Index: 0, Attempt: 1, Reason: "after the verdict"}),
	)
	a := r.Current(0)
	if a.Retry == nil || a.RetryID != "retried" || a.GaveUp {
		t.Errorf("attempt = %+v: want the retry (the first verdict) and not the give-up", a)
	}
	if r.HealRetries(0) != 1 {
		t.Errorf("HealRetries = %d", r.HealRetries(0))
	}
}

func TestAgentRunStepsGrowAndAreNamed(t *testing.T) {
	r := runstate.New("r1")
	apply(t, r,
		ev(t, events.RunStarted, "started", events.RunStartedData{Skill: "mine", Driver: "agent"}),
		ev(t, events.RunStepFailed, "f", events.StepFailedData{Step: "push", Index: 2, Attempt: 1, Error: events.ErrorInfo{Message: "boom"}}),
	)
	if len(r.Steps) != 3 || r.Steps[2].Name != "push" || r.Steps[2].Status != runstate.StepFailed {
		t.Errorf("steps = %+v", r.Steps)
	}
	if r.Agent != "test" || r.Driver != "agent" || r.Status != runstate.StatusRunning {
		t.Errorf("run = agent %q driver %q status %q", r.Agent, r.Driver, r.Status)
	}
	if len(r.Recent) != 1 || r.Recent[0].Error != "boom" {
		t.Errorf("recent = %+v", r.Recent)
	}
}

func TestApplyTwiceIsANoOp(t *testing.T) {
	a, b := runstate.New("r1"), runstate.New("r1")
	evs := []*events.Event{
		ev(t, events.RunStarted, "started", events.RunStartedData{Skill: "mine", Driver: "agent"}),
		ev(t, events.RunStepFailed, "f", events.StepFailedData{Step: "push", Index: 0, Attempt: 1, Error: events.ErrorInfo{Message: "boom"}}),
	}
	apply(t, a, evs...)
	apply(t, b, evs...)
	apply(t, b, evs...)
	sa, _ := a.Snapshot()
	sb, _ := b.Snapshot()
	if !bytes.Equal(sa, sb) {
		t.Errorf("applying the events again changed the state:\n%s\n%s", sa, sb)
	}
}

// TestLoad: the fold from the log knows where it stopped — the last
// event's position, time and id — and counts an invalid message's
// position without folding it.
func TestLoad(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := context.Background()
	first := ev(t, events.RunStarted, "r1/started", events.RunStartedData{Skill: "mine", Driver: "agent"})
	last := ev(t, events.RunStepCompleted, "r1/done", events.StepCompletedData{Step: "push", Index: 0, Attempt: 1})
	last.SetTime(t0.Add(time.Minute))
	for _, e := range []*events.Event{first, last} {
		if _, err := bus.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	r, err := runstate.Load(ctx, bus, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.LastSeq != 2 || !r.LastAt.Equal(last.Time()) || r.LastID != "r1/done" {
		t.Errorf("Load stopped at seq %d, %s, %q; want 2, %s, r1/done", r.LastSeq, r.LastAt, r.LastID, last.Time())
	}
	// Garbage on the run's subject: its position counts, nothing else.
	if _, err := bus.JetStream().PublishMsg(ctx, &nats.Msg{Subject: "heed.run.r1.step.failed", Data: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	if err := r.CatchUp(ctx, bus, nil); err != nil {
		t.Fatal(err)
	}
	if r.LastSeq != 3 || r.LastID != "r1/done" || r.Steps[0].Status != runstate.StepCompleted {
		t.Errorf("after garbage: seq %d, id %q, step %+v", r.LastSeq, r.LastID, r.Steps[0])
	}
}

// TestReplay: a run folded again from the positions of its messages
// (Seqs) is the run Load folds, garbage on its subject and messages stored
// after those positions included; a position that no longer holds the
// run's message leaves the new state untouched and says so.
func TestReplay(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := context.Background()
	of := func(run, id string, typ events.Type, data any) *events.Event {
		e, err := events.NewEvent(typ, run, id, "test", data)
		if err != nil {
			t.Fatal(err)
		}
		e.SetTime(t0)
		return &e
	}
	publish := func(evs ...*events.Event) {
		for _, e := range evs {
			if _, err := bus.Publish(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Two runs interleaved, garbage on r1's subject in between.
	for _, run := range []string{"r1", "r2"} {
		publish(of(run, run+"/started", events.RunStarted, events.RunStartedData{Skill: "mine", Driver: "agent"}))
	}
	for i := range 3 {
		for _, run := range []string{"r1", "r2"} {
			publish(of(run, fmt.Sprintf("%s/s%d", run, i), events.RunStepStarted, events.StepStartedData{Step: fmt.Sprintf("s%d", i), Index: i, Attempt: 1, Kind: "compute"}))
		}
		if i == 1 {
			if _, err := bus.JetStream().PublishMsg(ctx, &nats.Msg{Subject: "heed.run.r1.step.failed", Data: []byte("garbage")}); err != nil {
				t.Fatal(err)
			}
		}
		for _, run := range []string{"r1", "r2"} {
			publish(of(run, fmt.Sprintf("%s/c%d", run, i), events.RunStepCompleted, events.StepCompletedData{Step: fmt.Sprintf("s%d", i), Index: i, Attempt: 1}))
		}
	}
	snapshot := func(r *runstate.Run) string {
		t.Helper()
		b, err := r.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s last %d %s %s seqs %v", b, r.LastSeq, r.LastAt, r.LastID, r.Seqs())
	}
	load := func() *runstate.Run {
		t.Helper()
		r, err := runstate.Load(ctx, bus, "r1", nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	replay := func(seqs []uint64) (*runstate.Run, bool) {
		t.Helper()
		r := runstate.New("r1")
		ok, err := r.Replay(ctx, bus, nil, seqs)
		if err != nil {
			t.Fatal(err)
		}
		return r, ok
	}
	loaded := load()
	seqs := loaded.Seqs()
	if len(seqs) != 8 || !slices.IsSorted(seqs) {
		t.Fatalf("Seqs %v: want the 8 positions of r1's messages (7 events, the garbage), ascending", seqs)
	}
	if r, ok := replay(seqs); !ok || snapshot(r) != snapshot(loaded) {
		t.Fatalf("replayed (ok %v):\n%s\nloaded:\n%s", ok, snapshot(r), snapshot(loaded))
	}
	// Stored after the positions kept: read by subject from the last.
	publish(of("r1", "r1/done", events.RunCompleted, events.RunCompletedData{}))
	loaded = load()
	for _, kept := range [][]uint64{seqs, seqs[:2]} {
		if r, ok := replay(kept); !ok || snapshot(r) != snapshot(loaded) {
			t.Fatalf("replayed from %v (ok %v):\n%s\nloaded:\n%s", kept, ok, snapshot(r), snapshot(loaded))
		}
	}
	// Another run's message at a kept position, or one deleted since.
	empty := snapshot(runstate.New("r1"))
	r2, err := runstate.Load(ctx, bus, "r2", nil)
	if err != nil {
		t.Fatal(err)
	}
	mixed := append(slices.Clone(seqs[:3]), r2.Seqs()[3])
	slices.Sort(mixed)
	if r, ok := replay(mixed); ok || snapshot(r) != empty {
		t.Fatalf("replayed another run's message (ok %v): %s", ok, snapshot(r))
	}
	s, err := bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, seqs[4]); err != nil {
		t.Fatal(err)
	}
	if r, ok := replay(seqs); ok || snapshot(r) != empty {
		t.Fatalf("replayed a deleted message (ok %v): %s", ok, snapshot(r))
	}
}
