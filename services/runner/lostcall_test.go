package runner_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/services/runner"
)

// TestNonIdempotentToolAsksBeforeCallingAgain: the runner is killed while
// a tool that does not honour idempotency keys runs. The restarted runner
// does not call it again on its own: it pauses the run and asks a person,
// and calls it again only when told to.
func TestNonIdempotentToolAsksBeforeCallingAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("long tier (a runner process killed and its delivery redelivered, ~10 s): skipped by -short (make test-fast); make test and make unit run it")
	}
	bin := buildRunner(t)
	h := newHarness(t)
	h.confirmRouter()
	callLog := filepath.Join(t.TempDir(), "calls.log")
	tools := writeTools(t, `
  charge_card:
    command: SELF
    idempotent: false
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_SLEEP_HELPER: "1", HEED_CALL_LOG: `+strconv.Quote(callLog)+`}
    args: ["{{ args.duration }}"]
`)
	calls := func() int {
		b, _ := os.ReadFile(callLog)
		return strings.Count(string(b), "\n")
	}
	first, _ := runnerProcess(t, bin, h.env.URL(), tools, "runner 1")
	firstDone := make(chan struct{})
	go func() { _ = first.Wait(); close(firstDone) }()
	t.Cleanup(func() { _ = first.Process.Kill(); <-firstDone })

	id, err := startRun(h, "name: pay\nsteps:\n  - name: charge\n    tool: charge_card\n    args: {duration: 3s}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if calls() != 1 {
			return errors.New("the tool has not been called")
		}
		return nil
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-firstDone

	second, _ := runnerProcess(t, bin, h.env.URL(), tools, "runner 2")
	t.Cleanup(func() { _ = second.Process.Kill(); _ = second.Wait() })
	cid := runner.LostCallConfirmID(id, 0, 1)
	evs := h.waitRun(id, 30*time.Second, "the lost call's question", func(evs []*events.Event) bool {
		for _, ev := range ofType(evs, events.RunPaused) {
			if decode[events.RunPausedData](t, ev).ConfirmID == cid {
				return true
			}
		}
		return false
	})
	if n := calls(); n != 1 {
		t.Fatalf("the tool was called %d times before anyone was asked", n)
	}
	if got := ofType(evs, events.RunStepCompleted); len(got) != 0 {
		t.Fatalf("the step completed without an answer:\n%s", describe(evs))
	}
	// A person says: call it again.
	h.command(command.ConfirmAnswer, command.AnswerConfirmation{ID: cid, Choice: runner.ChoiceRunAgain, By: "user:alice", Channel: "test"})
	evs = h.waitRun(id, 30*time.Second, "run.completed", func(evs []*events.Event) bool { return len(ofType(evs, events.RunCompleted)) == 1 })
	if n := calls(); n != 2 {
		t.Errorf("the tool was called %d times, want 2 (once before the crash, once when told)", n)
	}
	res := ofType(evs, events.RunResumed)
	if len(res) != 1 {
		t.Fatalf("%d run.resumed:\n%s", len(res), describe(evs))
	}
	resumed := decode[events.RunResumedData](t, res[0])
	if resumed.ConfirmID != cid || resumed.Choice != runner.ChoiceRunAgain || resumed.By != "user:alice" {
		t.Errorf("run.resumed = %+v", resumed)
	}
}
