package runner

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
)

// TestLoadOfAParkedRunReadsItsPositions: the answer's load of a parked run
// folds the messages at the positions kept when it was parked (a run
// cached, then parked by a newer pause), not the run's subject from the
// log: given the positions less one, the load folds exactly those. Without
// positions (parked by an earlier process) or with positions that no
// longer hold the run's messages, it reads the whole history.
func TestLoadOfAParkedRunReadsItsPositions(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := "name: asky\nsteps:\n  - name: first\n    compute: \"1\"\n  - name: approve\n    confirm:\n      message: Go?\n      options:\n        - {label: Yes, value: yes}\n        - {label: No, value: no}\n"
	sk, err := skill.Load("asky.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(bus, &tool.Invoker{Registry: &tool.Registry{}}, eventstest.Logger(t), 5*time.Second)
	e.maxWaiting = 1
	const id = "parkedrun2"
	cid := ConfirmID(id, 1, 1)
	var seqs []uint64
	put := func(typ events.Type, subject, eventID string, data any) {
		t.Helper()
		ev, err := events.NewEvent(typ, subject, eventID, Source, data)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := bus.Publish(ctx, &ev)
		if err != nil {
			t.Fatal(err)
		}
		if subject == id {
			seqs = append(seqs, ack.Sequence)
			// As the runner's consumer hands them over.
			d := &events.Delivery{Event: &ev, Subject: typ.Subject(id), Seq: ack.Sequence, Delivered: 1}
			r, err := e.load(ctx, id, d)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Apply(&ev, ack.Sequence, e.skills); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(events.RunRequested, id, id+"/requested", events.RunRequestedData{Skill: events.SkillRef{Name: sk.Name, Source: sk.Source, Digest: sk.Digest}, Inputs: map[string]any{}, RequestedBy: "test"})
	put(events.RunStarted, id, id+"/started", events.RunStartedData{Skill: sk.Name, Driver: "runner", Steps: []string{"first", "approve"}})
	put(events.RunStepStarted, id, id+"/s0/a1/started", events.StepStartedData{Step: "first", Index: 0, Attempt: 1, Kind: "compute"})
	put(events.RunStepCompleted, id, id+"/s0/a1/completed", events.StepCompletedData{Step: "first", Index: 0, Attempt: 1, Output: 1})
	put(events.RunStepStarted, id, id+"/s1/a1/started", events.StepStartedData{Step: "approve", Index: 1, Attempt: 1, Kind: "confirm"})
	put(events.RunPaused, id, id+"/s1/paused", events.RunPausedData{Reason: events.PauseAwaitingConfirmation, Step: "approve", Index: 1, ConfirmID: cid})
	e.wait(id, cid)
	e.wait("newer", "newer-confirm") // parks id
	e.mu.Lock()
	p, parked := e.parked[id]
	e.mu.Unlock()
	if !parked || !slices.Equal(p.seqs, seqs) {
		t.Fatalf("parked %v with positions %v, want %v", parked, p.seqs, seqs)
	}

	// The direct gets the loads send, as the server sees them.
	requests, err := env.Conn(t).SubscribeSync("$JS.API.DIRECT.GET." + events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	bySubject := func() int {
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
	// An answer, as the load of a parked run meets it.
	answer, err := events.NewEvent(events.ConfirmAnswered, cid, cid+"/answer", Source, events.ConfirmAnsweredData{Choice: "yes", Method: "user", By: "user:test", RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	loadParked := func(kept []uint64) (*runstate.Run, int) {
		t.Helper()
		bySubject()
		e.mu.Lock()
		delete(e.runs, id)
		e.parked[id] = parkedRun{confirmID: cid, seqs: kept}
		e.mu.Unlock()
		r, err := e.load(ctx, id, &events.Delivery{Event: &answer, Subject: events.ConfirmAnswered.Subject(cid), Seq: seqs[len(seqs)-1] + 1, Delivered: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r, bySubject()
	}
	// All the positions: no read by subject.
	if r, n := loadParked(seqs); r.Steps[0].Status != runstate.StepCompleted || r.Status != runstate.StatusPaused || r.LastSeq != seqs[len(seqs)-1] || n != 0 {
		t.Fatalf("load from the positions: step %+v, status %s, last %d, %d reads by subject; want the whole history and none", r.Steps[0], r.Status, r.LastSeq, n)
	}
	// The step.completed of the first step left out of the positions.
	gap := append(append([]uint64{}, seqs[:3]...), seqs[4:]...)
	if r, n := loadParked(gap); r.Steps[0].Status == runstate.StepCompleted || r.Status != runstate.StatusPaused || n != 0 {
		t.Fatalf("load from positions without the first step's completion: step %+v, status %s, %d reads by subject; want it not completed (the positions were read, not the subject)", r.Steps[0], r.Status, n)
	}
	// No positions, or positions that hold something else: the history.
	for _, kept := range [][]uint64{nil, {seqs[0], seqs[len(seqs)-1] + 1000}} {
		if r, n := loadParked(kept); r.Steps[0].Status != runstate.StepCompleted || r.Status != runstate.StatusPaused || r.LastSeq != seqs[len(seqs)-1] || n == 0 {
			t.Fatalf("load from %v: step %+v, status %s, last %d, %d reads by subject; want the whole history, read by subject", kept, r.Steps[0], r.Status, r.LastSeq, n)
		}
	}
}
