package runner_test

import (
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/services/runner"
)

// TestContinueBeforeThePause: a continue that arrives while the run is
// still on its way to the pause (a tool step of 300 ms first) is not
// refused: the command follows the run's subjects (woken by its events)
// until the pause is stored, then answers it, and the run completes.
func TestContinueBeforeThePause(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1, LagWait: 5 * time.Second})
	h.confirmRouter()
	const skill = `name: slow_then_ask
steps:
  - name: work
    tool: sleeper
    args: {duration: 300ms, pidfile: ""}
  - name: approve
    confirm:
      message: "Go ahead?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
`
	id := h.start(skill, nil, false)
	reply := h.command(command.RunContinue, command.ContinueRun{RunID: id, Choice: "proceed", By: "agent:test"})
	if reply.RunID != id || reply.ConfirmID != runner.ConfirmID(id, 1, 1) || reply.Status != runstate.StatusRunning {
		t.Fatalf("continue reply %+v", reply)
	}
	evs := h.waitEnd(id, events.RunCompleted)
	if !hasType(events.RunPaused)(evs) {
		t.Errorf("the run completed without pausing:\n%s", describe(evs))
	}
}

// TestParkedRunsResume: with one waiting run kept in memory, the runs
// that paused before it are parked (out of the cache); their answers
// read them back from the log (by the positions of their messages, the
// steps before the pause included) and every run resumes, computes with
// what its first step computed, and completes once.
func TestParkedRunsResume(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{HealWait: -1, MaxWaiting: 1})
	h.confirmRouter()
	const skill = `name: ask_then_compute
steps:
  - name: first
    compute: "20 + 1"
    output: base
  - name: approve
    confirm:
      message: "Go ahead?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
  - name: sum
    compute: base * 2
    output: result
`
	var ids []string
	for range 4 {
		id := h.start(skill, nil, false)
		h.waitRun(id, 10*time.Second, "run.paused", hasType(events.RunPaused))
		ids = append(ids, id)
	}
	for _, id := range ids {
		reply := h.command(command.RunContinue, command.ContinueRun{RunID: id, Choice: "proceed", By: "agent:test"})
		if reply.RunID != id {
			t.Fatalf("continue reply %+v", reply)
		}
	}
	for _, id := range ids {
		evs := h.waitEnd(id, events.RunCompleted)
		if n := len(ofType(evs, events.RunResumed)); n != 1 {
			t.Errorf("run %s resumed %d times:\n%s", id, n, describe(evs))
		}
		end := ofType(evs, events.RunCompleted)
		if len(end) != 1 {
			t.Errorf("run %s completed %d times", id, len(end))
			continue
		}
		if d := decode[events.RunCompletedData](t, end[0]); d.Outputs["result"] != float64(42) {
			t.Errorf("run %s: result %v, want 42; outputs %v", id, d.Outputs["result"], d.Outputs)
		}
	}
}
