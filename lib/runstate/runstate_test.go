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

// logTally is the tally of run id as the index would count it: every
// message on the run's subject that decodes.
func logTally(t *testing.T, bus *events.Bus, id string) runstate.Tally {
	t.Helper()
	var tl runstate.Tally
	if _, err := events.ReadHistory(context.Background(), bus.JetStream(), events.EventStream, events.SubjectFilter("run", id), 0, func(raw events.RawMsg) error {
		if ev, err := bus.Codec().DecodeStored(raw); err == nil {
			tl.Count++
			tl.LastID = ev.ID()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return tl
}

// TestReplay: a run folded again from the positions of its messages
// (Seqs) is the run Load folds, garbage on its subject and messages stored
// after those positions included. A position that no longer holds the
// run's message, or a history that does not match the tally (a message
// the positions leave out), leaves the new state untouched and says so.
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
	replay := func(seqs []uint64, want runstate.Tally) (*runstate.Run, bool) {
		t.Helper()
		r := runstate.New("r1")
		ok, err := r.Replay(ctx, bus, nil, seqs, want)
		if err != nil {
			t.Fatal(err)
		}
		return r, ok
	}
	empty := snapshot(runstate.New("r1"))
	loaded := load()
	seqs := loaded.Seqs()
	if len(seqs) != 8 || !slices.IsSorted(seqs) {
		t.Fatalf("Seqs %v: want the 8 positions of r1's messages (7 events, the garbage), ascending", seqs)
	}
	tally := logTally(t, bus, "r1")
	if tally.Count != 7 || tally.LastID != "r1/c2" {
		t.Fatalf("tally %+v", tally)
	}
	if r, ok := replay(seqs, tally); !ok || snapshot(r) != snapshot(loaded) {
		t.Fatalf("replayed (ok %v):\n%s\nloaded:\n%s", ok, snapshot(r), snapshot(loaded))
	}
	// A tally the positions do not make (the index counts one more, or a
	// later last event), or none: nothing folded.
	for _, want := range []runstate.Tally{{Count: tally.Count + 1, LastID: tally.LastID}, {Count: tally.Count, LastID: "r1/c1"}, {}} {
		if r, ok := replay(seqs, want); ok || snapshot(r) != empty {
			t.Fatalf("replayed against tally %+v (ok %v): %s", want, ok, snapshot(r))
		}
	}
	// The positions less one: the tally tells.
	if r, ok := replay(append(slices.Clone(seqs[:3]), seqs[4:]...), tally); ok || snapshot(r) != empty {
		t.Fatalf("replayed positions that leave one out (ok %v): %s", ok, snapshot(r))
	}
	// Stored after the positions kept: read by subject from the last.
	publish(of("r1", "r1/done", events.RunCompleted, events.RunCompletedData{}))
	loaded, tally = load(), logTally(t, bus, "r1")
	for _, kept := range [][]uint64{seqs, seqs[:2]} {
		if r, ok := replay(kept, tally); !ok || snapshot(r) != snapshot(loaded) {
			t.Fatalf("replayed from %v (ok %v):\n%s\nloaded:\n%s", kept, ok, snapshot(r), snapshot(loaded))
		}
	}
	// Another run's message at a kept position, or one deleted since.
	r2, err := runstate.Load(ctx, bus, "r2", nil)
	if err != nil {
		t.Fatal(err)
	}
	mixed := append(slices.Clone(seqs[:3]), r2.Seqs()[3])
	slices.Sort(mixed)
	if r, ok := replay(mixed, tally); ok || snapshot(r) != empty {
		t.Fatalf("replayed another run's message (ok %v): %s", ok, snapshot(r))
	}
	s, err := bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, seqs[4]); err != nil {
		t.Fatal(err)
	}
	if r, ok := replay(seqs, tally); ok || snapshot(r) != empty {
		t.Fatalf("replayed a deleted message (ok %v): %s", ok, snapshot(r))
	}
}

// TestSeqsOfWhatWasApplied: the positions of a run are those of every
// message of its own applied with one, in log order whatever the order of
// application (a redelivery brings an earlier event after a later one),
// once each; an event applied before it was stored (seq 0: the runner's
// own, as it decides) has none until its delivery comes back, and if that
// never comes, a Replay of the positions does not match the run's tally.
func TestSeqsOfWhatWasApplied(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := context.Background()
	started := ev(t, events.RunStarted, "r1/started", events.RunStartedData{Skill: "mine", Driver: "agent"})
	s0 := ev(t, events.RunStepStarted, "r1/s0", events.StepStartedData{Step: "s0", Index: 0, Attempt: 1, Kind: "compute"})
	c0 := ev(t, events.RunStepCompleted, "r1/c0", events.StepCompletedData{Step: "s0", Index: 0, Attempt: 1})
	answer, err := events.NewEvent(events.ConfirmAnswered, "c1", "c1/answer", "test", events.ConfirmAnsweredData{Choice: "yes", Method: "user", By: "user:test", RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	var seq []uint64
	for _, e := range []*events.Event{started, s0, c0} {
		ack, err := bus.Publish(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, ack.Sequence)
	}
	r := runstate.New("r1")
	for _, x := range []struct {
		e   *events.Event
		seq uint64
	}{{started, seq[0]}, {c0, seq[2]}, {s0, seq[1]}, {c0, seq[2]}, {&answer, seq[2] + 1}} {
		if err := r.Apply(x.e, x.seq, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Seqs(); !slices.Equal(got, seq) {
		t.Fatalf("Seqs %v after applying out of order, twice, and an answer; want %v", got, seq)
	}
	loaded, err := runstate.Load(ctx, bus, "r1", nil)
	if err != nil {
		t.Fatal(err)
	}
	replayed := runstate.New("r1")
	if ok, err := replayed.Replay(ctx, bus, nil, r.Seqs(), logTally(t, bus, "r1")); err != nil || !ok {
		t.Fatalf("replay: ok %v, err %v", ok, err)
	}
	a, _ := replayed.Snapshot()
	b, _ := loaded.Snapshot()
	if string(a) != string(b) {
		t.Fatalf("replayed:\n%s\nloaded:\n%s", a, b)
	}

	// Applied before stored; the delivery of s0 never came back.
	own := runstate.New("r1")
	for _, e := range []*events.Event{started, s0, c0} {
		if err := own.Apply(e, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []struct {
		e   *events.Event
		seq uint64
	}{{started, seq[0]}, {c0, seq[2]}} {
		if err := own.Apply(x.e, x.seq, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := own.Seqs(); !slices.Equal(got, []uint64{seq[0], seq[2]}) {
		t.Fatalf("Seqs %v, want %v", got, []uint64{seq[0], seq[2]})
	}
	if ok, err := runstate.New("r1").Replay(ctx, bus, nil, own.Seqs(), logTally(t, bus, "r1")); err != nil || ok {
		t.Fatalf("replay of positions without s0: ok %v, err %v; want false (the tally counts s0)", ok, err)
	}
}
