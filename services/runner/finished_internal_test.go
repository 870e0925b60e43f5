package runner

import (
	"testing"
	"time"

	"github.com/heedhq/heed/lib/runstate"
)

// TestFinishedRunEndedAgainAfterForgetIsKept: a finished run forgotten
// (its late event's publish failed) and ended again is kept for
// finishedKeep from its new end: the entry of its first end went with the
// forget, so trimming cannot drop the state that ended just now (found
// by review).
func TestFinishedRunEndedAgainAfterForgetIsKept(t *testing.T) {
	e := &engine{runs: map[string]*runstate.Run{}, parked: map[string]waitingRun{}, waiting: map[string]waitingRun{}, handled: map[string]time.Time{}, finished: map[string]*runstate.Run{}}
	e.done(runstate.New("a"))
	e.finishedAt[0] = time.Now().Add(-2 * finishedKeep) // a ended long ago
	e.forget("a")
	e.done(runstate.New("a")) // a ends again now
	e.trimFinished(time.Now())
	if _, ok := e.finished["a"]; !ok {
		t.Fatalf("a, which ended just now, was trimmed by its older entry (ids %v)", e.finishedIDs)
	}
}

// TestFinishedRunsAreTrimmedAsRunsEnd: with the sweep off, an end trims
// what ended more than finishedKeep before it.
func TestFinishedRunsAreTrimmedAsRunsEnd(t *testing.T) {
	e := &engine{runs: map[string]*runstate.Run{}, parked: map[string]waitingRun{}, waiting: map[string]waitingRun{}, handled: map[string]time.Time{}, finished: map[string]*runstate.Run{}}
	e.done(runstate.New("old"))
	e.finishedAt[0] = time.Now().Add(-2 * finishedKeep)
	e.done(runstate.New("new"))
	if _, ok := e.finished["old"]; ok || len(e.finishedIDs) != 1 || e.finishedIDs[0] != "new" || len(e.finishedAt) != 1 {
		t.Fatalf("after another run ended: finished %v", e.finishedIDs)
	}
}
