package runstate_test

import (
	"bytes"
	"context"
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
