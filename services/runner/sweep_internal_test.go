package runner

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/runstate"
)

// TestDrivenIDsLeavesOutRunsHandledLately: the sweep and the abandon check
// read only the driven runs this process has not handled an event of since
// the quiet limit (cached or parked), and a run it never handled (parked
// after a restart, forgotten) is always read.
func TestDrivenIDsLeavesOutRunsHandledLately(t *testing.T) {
	e := &engine{runs: map[string]*runstate.Run{}, parked: map[string]bool{}, handled: map[string]time.Time{}}
	now := time.Now()
	e.runs["busy"], e.runs["quiet"], e.runs["unseen"] = runstate.New("busy"), runstate.New("quiet"), runstate.New("unseen")
	e.parked["parkedbusy"], e.parked["parkedquiet"] = true, true
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
	if !e.drivenIDs(now.Add(-30 * time.Second))["busy"] {
		t.Fatal("a forgotten run, cached again, is read by the next sweep")
	}
}
