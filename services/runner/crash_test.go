package runner_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go"
)

// buildRunner builds cmd/heed-runner into a temporary directory.
func buildRunner(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build heed-runner: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "heed-runner")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/heed-runner")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/heed-runner: %v\n%s", err, out)
	}
	return bin
}

// lockedBuffer collects a process's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runnerProcess starts the runner binary against url.
func runnerProcess(t *testing.T, bin, url, tools, name string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	cmd := exec.Command(bin, "--nats-url", url, "--tools", tools, "--log-level", "info")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", name, logs.String())
		}
	})
	return cmd, logs
}

// stopOnSIGTERM watches a runner process: exited is closed when it exits
// (for whatever reason), and stop, at the end of a test, sends SIGTERM,
// which it must obey within 15 s (it is killed otherwise, and the test
// fails).
func stopOnSIGTERM(t *testing.T, cmd *exec.Cmd) (stop func(), exited <-chan struct{}) {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Errorf("%s did not stop on SIGTERM", cmd.Path)
			_ = cmd.Process.Kill()
			<-done
		}
	}, done
}

const crashSkill = `name: crashy
steps:
  - name: s1
    tool: logged_sleeper
    args: {duration: 50ms}
  - name: s2
    tool: logged_sleeper
    args: {duration: 100ms}
  - name: s3
    tool: logged_sleeper
    args: {duration: 150ms}
  - name: s4
    tool: logged_sleeper
    args: {duration: 100ms}
  - name: s5
    tool: logged_sleeper
    args: {duration: 50ms}
`

// toolRunning says whether a call of the sleep helper has started and not
// finished (helpers_test.go logs both).
func toolRunning(callLog string) bool {
	started, _ := os.ReadFile(callLog)
	done, _ := os.ReadFile(callLog + ".done")
	finished := map[string]int{}
	for _, k := range strings.Fields(string(done)) {
		finished[k]++
	}
	for _, k := range strings.Fields(string(started)) {
		if finished[k] == 0 {
			return true
		}
		finished[k]--
	}
	return false
}

// TestCrashAcceptance: 100 runs are mid-flight when the runner process is
// killed with SIGKILL; a new runner process finishes every one of them,
// no step completes twice, and every interrupted step is called again with
// the same idempotency key.
func TestCrashAcceptance(t *testing.T) {
	if testing.Short() {
		t.Skip("long tier (100 runs across a SIGKILL, ~20 s): skipped by -short (make test-fast); make test and make unit run it")
	}
	const runs, stepsPerRun = 100, 5
	bin := buildRunner(t)
	h := newHarness(t)
	callLog := filepath.Join(t.TempDir(), "calls.log")
	tools := writeTools(t, `
  logged_sleeper:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_SLEEP_HELPER: "1", HEED_CALL_LOG: `+strconv.Quote(callLog)+`}
    args: ["{{ args.duration }}"]
`)

	var completedSteps atomic.Int64
	stepSub, err := h.nc.Subscribe("heed.run.*.step.completed", func(*nats.Msg) { completedSteps.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stepSub.Unsubscribe() }()
	var doneMu sync.Mutex
	done := map[string]bool{}
	runSub, err := h.nc.Subscribe("heed.run.*.completed", func(m *nats.Msg) {
		if _, id, _, ok := events.ParseSubject(m.Subject); ok {
			doneMu.Lock()
			done[id] = true
			doneMu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = runSub.Unsubscribe() }()
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	first, _ := runnerProcess(t, bin, h.env.URL(), tools, "runner 1")
	firstDone := make(chan struct{})
	go func() { _ = first.Wait(); close(firstDone) }()
	t.Cleanup(func() { _ = first.Process.Kill(); <-firstDone })

	ids := make([]string, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := startRun(h, crashSkill, nil)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// Kill the runner once about 30% of all steps completed and a tool is
	// running: a tool started (its key in the call log) and not finished
	// (not in the done log) has no step.completed yet, so the kill
	// interrupts it. Counting completions alone is not enough: on a loaded
	// machine the event handling between steps takes far longer than the
	// tools, and a kill can fall where no tool is running (CI saw it).
	deadline := time.Now().Add(60 * time.Second)
	for completedSteps.Load() < runs*stepsPerRun*3/10 || !toolRunning(callLog) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d steps completed in 60s, or no tool was ever seen running", completedSteps.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-firstDone
	killedAt := completedSteps.Load()
	doneMu.Lock()
	doneAtKill := len(done)
	doneMu.Unlock()
	if doneAtKill == runs {
		t.Fatalf("every run had completed when the runner was killed: the test proves nothing")
	}

	second, _ := runnerProcess(t, bin, h.env.URL(), tools, "runner 2")
	stop, secondExited := stopOnSIGTERM(t, second)
	defer stop()

	restarted := time.Now()
	for {
		doneMu.Lock()
		n := len(done)
		doneMu.Unlock()
		if n == runs {
			break
		}
		if time.Since(restarted) > 90*time.Second {
			// Say where each run that did not complete stands, for the
			// next person to read the failure.
			doneMu.Lock()
			for _, id := range ids {
				if done[id] {
					continue
				}
				t.Logf("run %s did not complete; its log: %s", id, describe(h.runLog(id)))
			}
			doneMu.Unlock()
			t.Fatalf("%d of %d runs completed within 90s of the restart", n, runs)
		}
		select {
		case <-secondExited:
			t.Fatalf("runner 2 exited: %v", second.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if testing.Verbose() {
		t.Logf("killed after %d step completions (%d runs done); all runs done %s after the restart", killedAt, doneAtKill, time.Since(restarted).Round(time.Millisecond))
	}

	// The log is the proof.
	byRun := map[string][]*events.Event{}
	for _, ev := range h.log("heed.run.>") {
		byRun[ev.Subject()] = append(byRun[ev.Subject()], ev)
	}
	type ref struct {
		Index          int    `json:"index"`
		Attempt        int    `json:"attempt"`
		IdempotencyKey string `json:"idempotency_key"`
	}
	expected := map[string]bool{}
	for _, id := range ids {
		evs := byRun[id]
		if n := len(ofType(evs, events.RunCompleted)); n != 1 {
			t.Errorf("run %s: %d run.completed", id, n)
		}
		if n := len(ofType(evs, events.RunFailed)) + len(ofType(evs, events.RunCancelled)); n != 0 {
			t.Errorf("run %s failed or was cancelled:\n%s", id, describe(evs))
		}
		perAttempt := map[string]int{}
		perStep := map[int]int{}
		for _, ev := range ofType(evs, events.RunStepCompleted) {
			r := decode[ref](t, ev)
			perAttempt[fmt.Sprintf("%d/%d", r.Index, r.Attempt)]++
			perStep[r.Index]++
		}
		for k, n := range perAttempt {
			if n != 1 {
				t.Errorf("run %s: step attempt %s completed %d times", id, k, n)
			}
		}
		for i := range stepsPerRun {
			if perStep[i] != 1 {
				t.Errorf("run %s: step %d completed %d times", id, i, perStep[i])
			}
			if perAttempt[fmt.Sprintf("%d/1", i)] != 1 {
				t.Errorf("run %s: step %d did not complete in its first attempt: %v", id, i, perAttempt)
			}
			expected[tool.IdempotencyKey(id, i, 1)] = true
		}
		startedPer := map[string]int{}
		for _, ev := range ofType(evs, events.RunStepStarted) {
			r := decode[ref](t, ev)
			startedPer[fmt.Sprintf("%d/%d", r.Index, r.Attempt)]++
			if want := tool.IdempotencyKey(id, r.Index, r.Attempt); r.IdempotencyKey != want {
				t.Errorf("run %s step %d attempt %d: idempotency key %q, want %q", id, r.Index, r.Attempt, r.IdempotencyKey, want)
			}
		}
		for k, n := range startedPer {
			if n != 1 {
				t.Errorf("run %s: step attempt %s started %d times in the log", id, k, n)
			}
		}
	}
	if t.Failed() {
		return
	}

	// Every call the tools received carried an expected key; the steps the
	// kill interrupted were called again with the same key.
	b, err := os.ReadFile(callLog)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, k := range strings.Fields(string(b)) {
		if !expected[k] {
			t.Errorf("a tool was called with key %q, which belongs to no step attempt of the log", k)
		}
		calls[k]++
	}
	again := 0
	for k := range expected {
		switch n := calls[k]; {
		case n == 0:
			t.Errorf("step %s completed without its tool being called", k)
		case n > 1:
			again++
		}
	}
	if again == 0 {
		t.Errorf("no step was called twice: nothing was interrupted by the kill (killed after %d completions)", killedAt)
	}
	if testing.Verbose() {
		t.Logf("%d tool calls for %d step attempts; %d interrupted steps re-run with their own key", len(strings.Fields(string(b))), len(expected), again)
	}
}
