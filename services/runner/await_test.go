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
