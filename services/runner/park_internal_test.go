package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
)

// logTally counts a run's events as the index does: every message on its
// subject that decodes, and the id of the last.
func logTally(bus *events.Bus) func(ctx context.Context, id string) (runstate.Tally, error) {
	return func(ctx context.Context, id string) (runstate.Tally, error) {
		var tl runstate.Tally
		_, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, events.SubjectFilter("run", id), 0, func(raw events.RawMsg) error {
			if ev, err := bus.Codec().DecodeStored(raw); err == nil {
				tl.Count++
				tl.LastID = ev.ID()
			}
			return nil
		})
		return tl, err
	}
}

// parkedRunFixture is a run of two steps (a computed value, then a
// question) fed to an engine delivery by delivery, paused and then parked
// by a newer pause. Events listed in lost are applied as the decision
// that wrote them applies them (before they are stored) and their
// deliveries never come back.
type parkedRunFixture struct {
	e    *engine
	id   string
	cid  string
	seqs []uint64 // positions of the run's messages, all of them
	// requests counts the direct gets that read the run by subject.
	bySubject func() int
}

func newParkedRun(t *testing.T, id string, lost map[string]bool) *parkedRunFixture {
	t.Helper()
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	src := "name: asky\nsteps:\n  - name: first\n    compute: \"1\"\n  - name: approve\n    confirm:\n      message: Go?\n      options:\n        - {label: Yes, value: yes}\n        - {label: No, value: no}\n"
	sk, err := skill.Load("asky.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(bus, &tool.Invoker{Registry: &tool.Registry{}}, eventstest.Logger(t), 5*time.Second)
	e.maxWaiting = 1
	f := &parkedRunFixture{e: e, id: id, cid: ConfirmID(id, 1, 1)}
	var r *runstate.Run
	put := func(typ events.Type, eventID string, data any) {
		t.Helper()
		ev, err := events.NewEvent(typ, id, eventID, Source, data)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := bus.Publish(ctx, &ev)
		if err != nil {
			t.Fatal(err)
		}
		f.seqs = append(f.seqs, ack.Sequence)
		d := &events.Delivery{Event: &ev, Subject: typ.Subject(id), Seq: ack.Sequence, Delivered: 1}
		if r, err = e.load(ctx, id, d); err != nil {
			t.Fatal(err)
		}
		seq := ack.Sequence
		if lost[eventID] {
			seq = 0
		}
		if err := r.Apply(&ev, seq, e.skills); err != nil {
			t.Fatal(err)
		}
	}
	put(events.RunRequested, id+"/requested", events.RunRequestedData{Skill: events.SkillRef{Name: sk.Name, Source: sk.Source, Digest: sk.Digest}, Inputs: map[string]any{}, RequestedBy: "test"})
	put(events.RunStarted, id+"/started", events.RunStartedData{Skill: sk.Name, Driver: "runner", Steps: []string{"first", "approve"}})
	put(events.RunStepStarted, id+"/s0/a1/started", events.StepStartedData{Step: "first", Index: 0, Attempt: 1, Kind: "compute"})
	put(events.RunStepCompleted, id+"/s0/a1/completed", events.StepCompletedData{Step: "first", Index: 0, Attempt: 1, Output: 1})
	put(events.RunStepStarted, id+"/s1/a1/started", events.StepStartedData{Step: "approve", Index: 1, Attempt: 1, Kind: "confirm"})
	put(events.RunPaused, id+"/s1/paused", events.RunPausedData{Reason: events.PauseAwaitingConfirmation, Step: "approve", Index: 1, ConfirmID: f.cid})
	// The index's tally, as it has folded the whole run (read now, not
	// during the loads, whose reads by subject are counted).
	tl, err := logTally(bus)(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	e.tally = func(context.Context, string) (runstate.Tally, error) { return tl, nil }
	if r.Steps[0].Status != runstate.StepCompleted || r.Status != runstate.StatusPaused {
		t.Fatalf("in memory before parking: step %+v, status %s", r.Steps[0], r.Status)
	}
	e.wait(id, f.cid, r.Seqs())
	e.wait("newer", "newer-confirm", nil) // parks id
	e.mu.Lock()
	_, parked := e.parked[id]
	e.mu.Unlock()
	if !parked {
		t.Fatal("the run was not parked")
	}

	// The direct gets the loads send, as the server sees them.
	requests, err := env.Conn(t).SubscribeSync("$JS.API.DIRECT.GET." + events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	f.bySubject = func() int {
		t.Helper()
		if err := env.Conn(t).Flush(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			m, err := requests.NextMsg(50 * time.Millisecond)
			if err != nil {
				return n
			}
			if strings.Contains(string(m.Data), `"next_by_subj":"heed.run.`+id) {
				n++
			}
		}
	}
	return f
}

// load parks the run again with positions kept and loads it as its
// answer's delivery does; it reports the reads by subject it made.
func (f *parkedRunFixture) load(t *testing.T, kept []uint64) (*runstate.Run, int) {
	t.Helper()
	f.bySubject()
	f.e.mu.Lock()
	delete(f.e.runs, f.id)
	f.e.parked[f.id] = waitingRun{confirmID: f.cid, seqs: kept}
	f.e.mu.Unlock()
	answer, err := events.NewEvent(events.ConfirmAnswered, f.cid, f.cid+"/answer", Source, events.ConfirmAnsweredData{Choice: "yes", Method: "user", By: "user:test", RunID: f.id})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.e.load(context.Background(), f.id, &events.Delivery{Event: &answer, Subject: events.ConfirmAnswered.Subject(f.cid), Seq: f.seqs[len(f.seqs)-1] + 1, Delivered: 1})
	if err != nil {
		t.Fatal(err)
	}
	return r, f.bySubject()
}

// TestLoadOfAParkedRunReadsItsPositions: the answer's load of a parked run
// folds the messages at the positions its worker kept when it paused, not
// the run's subject, when they are as many as the index counts; positions
// that leave one out, that no longer hold the run's messages, or none
// (parked by an earlier process), read the whole history by subject.
func TestLoadOfAParkedRunReadsItsPositions(t *testing.T) {
	f := newParkedRun(t, "parkedrun2", nil)
	e := f.e
	e.mu.Lock()
	kept := e.parked[f.id].seqs
	e.mu.Unlock()
	if !slices.Equal(kept, f.seqs) {
		t.Fatalf("parked with positions %v, want %v", kept, f.seqs)
	}
	whole := func(r *runstate.Run) bool {
		return r.Steps[0].Status == runstate.StepCompleted && r.Status == runstate.StatusPaused && r.LastSeq == f.seqs[len(f.seqs)-1]
	}
	if r, n := f.load(t, f.seqs); !whole(r) || n != 0 {
		t.Fatalf("load from the positions: step %+v, status %s, last %d, %d reads by subject; want the whole history and none", r.Steps[0], r.Status, r.LastSeq, n)
	}
	gap := append(slices.Clone(f.seqs[:3]), f.seqs[4:]...) // no step.completed
	for _, kept := range [][]uint64{gap, nil, {f.seqs[0], f.seqs[len(f.seqs)-1] + 1000}} {
		if r, n := f.load(t, kept); !whole(r) || n == 0 {
			t.Fatalf("load from %v: step %+v, status %s, last %d, %d reads by subject; want the whole history, read by subject", kept, r.Steps[0], r.Status, r.LastSeq, n)
		}
	}
	// The index lags or does not know the run: by subject.
	e.tally = func(context.Context, string) (runstate.Tally, error) { return runstate.Tally{}, nil }
	if r, n := f.load(t, f.seqs); !whole(r) || n == 0 {
		t.Fatalf("load without a tally: step %+v, status %s, %d reads by subject; want the whole history, read by subject", r.Steps[0], r.Status, n)
	}
}

// TestParkedRunWithAnEventItsDeliveryNeverBrought: the run in memory holds
// an event the runner applied before it was stored (as it applies what it
// decides), whose delivery never reached the handler, so its position was
// never kept. The answer's load must not lose it: the positions fall
// short of the index's count, and the run is read by subject.
func TestParkedRunWithAnEventItsDeliveryNeverBrought(t *testing.T) {
	f := newParkedRun(t, "parkedrunlost", map[string]bool{"parkedrunlost/s0/a1/completed": true})
	f.e.mu.Lock()
	kept := f.e.parked[f.id].seqs
	f.e.mu.Unlock()
	if len(kept) != len(f.seqs)-1 {
		t.Fatalf("kept %v of %v: want all but the step.completed", kept, f.seqs)
	}
	r, n := f.load(t, kept)
	if r.Steps[0].Status != runstate.StepCompleted || n == 0 {
		t.Fatalf("load: first step %s, %d reads by subject; want completed, as the log says, read by subject", r.Steps[0].Status, n)
	}
}

// TestParkingReadsNoOtherWorkersRun: a run is parked by another run's
// worker (the one whose pause goes past the limit) while the parked run's
// own worker may be applying an event to its state; parking takes only
// what the run's worker handed over when it paused (run with -race).
func TestParkingReadsNoOtherWorkersRun(t *testing.T) {
	e := &engine{runs: map[string]*runstate.Run{}, parked: map[string]waitingRun{}, waiting: map[string]waitingRun{}, handled: map[string]time.Time{}, maxWaiting: 1}
	r := runstate.New("old")
	e.runs["old"] = r
	e.wait("old", "old-s0-a1", r.Seqs())
	evs := make([]events.Event, 200)
	for i := range evs {
		ev, err := events.NewEvent(events.RunWarning, "old", fmt.Sprintf("old/w%d", i), Source, nil)
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = ev
	}
	var wg sync.WaitGroup
	wg.Go(func() { // old's worker, handling a delivery with the pointer it loaded
		for i := range evs {
			_ = r.Apply(&evs[i], uint64(10+i), nil)
		}
	})
	e.wait("new", "new-s0-a1", nil) // new's worker: parks old
	wg.Wait()
	e.mu.Lock()
	_, parked := e.parked["old"]
	e.mu.Unlock()
	if !parked {
		t.Fatal("old was not parked")
	}
}

// TestFinishedRunsAreForgottenAfterAWhile: an ended run's state is kept
// for the deliveries of its end, then let go (memory at rest), whoever
// else ended since; a run that ended within finishedKeep stays.
func TestFinishedRunsAreForgottenAfterAWhile(t *testing.T) {
	e := &engine{runs: map[string]*runstate.Run{}, parked: map[string]waitingRun{}, waiting: map[string]waitingRun{}, handled: map[string]time.Time{}, finished: map[string]*runstate.Run{}}
	for _, id := range []string{"a", "b", "c"} {
		e.done(runstate.New(id))
	}
	e.done(runstate.New("b")) // ended again: still one entry
	e.trimFinished(time.Now())
	if len(e.finished) != 3 || len(e.finishedIDs) != 3 || len(e.finishedAt) != 3 || !e.knows("a") {
		t.Fatalf("trimmed at once: %d finished, %v", len(e.finished), e.finishedIDs)
	}
	e.finishedAt[0] = time.Now().Add(-2 * finishedKeep) // a ended long ago
	e.trimFinished(time.Now())
	if _, ok := e.finished["a"]; ok || len(e.finished) != 2 || !slices.Equal(e.finishedIDs, []string{"b", "c"}) || len(e.finishedAt) != 2 {
		t.Fatalf("after a's time: %d finished, %v", len(e.finished), e.finishedIDs)
	}
	e.trimFinished(time.Now().Add(finishedKeep + time.Second))
	if len(e.finished) != 0 || len(e.finishedIDs) != 0 || len(e.finishedAt) != 0 || e.knows("b") {
		t.Fatalf("after finishedKeep: %d finished, %v", len(e.finished), e.finishedIDs)
	}
}

// TestCommandsReadAWaitingRunByItsPositions: a command (continue, retry,
// cancel, get) reads the run from the log; a run waiting for an answer,
// parked or cached, is read by the positions its worker handed over, with
// no read by subject, and a run with none by subject.
func TestCommandsReadAWaitingRunByItsPositions(t *testing.T) {
	f := newParkedRun(t, "parkedrun3", nil)
	c := &commands{e: f.e}
	whole := func(r *runstate.Run) bool {
		return r.Steps[0].Status == runstate.StepCompleted && r.Status == runstate.StatusPaused && r.LastSeq == f.seqs[len(f.seqs)-1]
	}
	load := func(what string, wantBySubject bool) {
		t.Helper()
		f.bySubject()
		r, err := c.loadRun(context.Background(), f.id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := f.bySubject(); !whole(r) || (n > 0) != wantBySubject {
			t.Fatalf("%s: step %+v, status %s, last %d, %d reads by subject (want some: %v)", what, r.Steps[0], r.Status, r.LastSeq, n, wantBySubject)
		}
	}
	load("parked", false)
	f.e.mu.Lock()
	f.e.waiting[f.id] = f.e.parked[f.id]
	delete(f.e.parked, f.id)
	f.e.mu.Unlock()
	load("waiting, cached", false)
	f.e.forget(f.id)
	load("neither", true)
}
