package runner_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/tool"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

const sha40 = "0123456789abcdef0123456789abcdef01234567"

func releaseProd(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("../../skills/release_prod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var allFour = []string{
	"step.started:0/1", "step.completed:0/1",
	"step.started:1/1", "step.completed:1/1",
	"step.started:2/1", "step.completed:2/1",
	"step.started:3/1", "step.completed:3/1",
}

// TestReleaseProd runs the example release skill through the runner and
// the confirm router, each with its own connection.
func TestReleaseProd(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	src := releaseProd(t)

	t.Run("yes completes", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		id := h.start(src, map[string]any{"commit_sha": sha40}, true)
		evs := h.waitEnd(id, events.RunCompleted)
		if got := events.Type(evs[0].Type()); got != events.RunRequested {
			t.Errorf("first event %s", got)
		}
		if got := events.Type(evs[len(evs)-1].Type()); got != events.RunCompleted {
			t.Errorf("last event %s", got)
		}
		started := decode[events.RunStartedData](t, ofType(evs, events.RunStarted)[0])
		if started.Driver != "runner" || started.Skill != "release_prod" || !started.Yes ||
			!reflect.DeepEqual(started.Steps, []string{"check_image", "plan", "confirm_release", "open_mr"}) {
			t.Errorf("run.started = %+v", started)
		}
		if got := steps(t, evs); !reflect.DeepEqual(got, allFour) {
			t.Errorf("steps:\n got  %v\n want %v", got, allFour)
		}
		first := decode[events.StepStartedData](t, ofType(evs, events.RunStepStarted)[0])
		if first.Tool != "quay_check" || first.IdempotencyKey != tool.IdempotencyKey(id, 0, 1) || first.Args["tag"] != sha40 || first.Kind != "tool" {
			t.Errorf("check_image started = %+v", first)
		}
		for _, ev := range evs {
			if ev.Source() != runner.Source {
				t.Errorf("%s from %s", ev.Type(), ev.Source())
			}
		}

		cid := runner.ConfirmID(id, 2, 1)
		paused := decode[events.RunPausedData](t, ofType(evs, events.RunPaused)[0])
		if paused.ConfirmID != cid || paused.Reason != events.PauseAwaitingConfirmation {
			t.Errorf("run.paused = %+v", paused)
		}
		cevs := h.log(events.SubjectFilter("confirm", cid))
		req := ofType(cevs, events.ConfirmRequested)
		ans := ofType(cevs, events.ConfirmAnswered)
		if len(req) != 1 || len(ans) != 1 {
			t.Fatalf("confirmation %s log:\n%s", cid, describe(cevs))
		}
		rq := decode[events.ConfirmRequestedData](t, req[0])
		wantMsg := "Ready to release 01234567 (quay.io/app-sre/backend:" + sha40 + ") to production.\nThis opens an app-interface merge request."
		if !rq.Yes || rq.RunID != id || rq.Step != "confirm_release" || rq.Default != "cancel" || len(rq.Options) != 2 ||
			strings.TrimSpace(rq.Message) != wantMsg || rq.Title != "Release to production" {
			t.Errorf("confirm.requested = %+v", rq)
		}
		a := decode[events.ConfirmAnsweredData](t, ans[0])
		if a.Method != events.MethodOverride || a.Choice != "proceed" || a.By != confirm.Source || a.RunID != id {
			t.Errorf("confirm.answered = %+v", a)
		}
		resumed := decode[events.RunResumedData](t, ofType(evs, events.RunResumed)[0])
		if resumed.Choice != "proceed" || resumed.Method != events.MethodOverride || resumed.ConfirmID != cid {
			t.Errorf("run.resumed = %+v", resumed)
		}
		done := decode[events.RunCompletedData](t, ofType(evs, events.RunCompleted)[0])
		mr, _ := done.Outputs["mr"].(map[string]any)
		url, _ := mr["mr"].(string)
		if !strings.HasPrefix(url, "https://gitlab.example.com/service/app-interface/-/merge_requests/") || mr["sha"] != sha40 {
			t.Errorf("outputs.mr = %#v", done.Outputs["mr"])
		}
		if want := "Released 01234567 to production: " + url; strings.TrimSpace(done.Summary) != want {
			t.Errorf("summary %q, want %q", done.Summary, want)
		}
		if done.Outputs["decision"] != "proceed" {
			t.Errorf("outputs.decision = %#v", done.Outputs["decision"])
		}
	})

	t.Run("pauses until answered", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		id := h.start(src, map[string]any{"commit_sha": sha40, "environment": "stage"}, false)
		evs := h.waitRun(id, 30*time.Second, "run.paused", hasType(events.RunPaused))
		cid := runner.ConfirmID(id, 2, 1)
		paused := decode[events.RunPausedData](t, ofType(evs, events.RunPaused)[0])
		if paused.ConfirmID != cid || paused.Step != "confirm_release" || paused.Index != 2 ||
			paused.Message != "Ready to release 01234567 (quay.io/app-sre/backend:"+sha40+") to stage." {
			t.Errorf("run.paused = %+v", paused)
		}
		// Nothing moves while the question is open.
		// Asserting an absence: the parallel subtests keep the shared runner
		// busy, so there is no moment it is idle to wait for. It acts on an
		// event within milliseconds; 300 ms is a wide margin.
		time.Sleep(300 * time.Millisecond)
		evs = h.runLog(id)
		if got := steps(t, evs); !reflect.DeepEqual(got, allFour[:5]) {
			t.Errorf("steps while paused: %v", got)
		}
		if ended(evs) != "" {
			t.Fatalf("a paused run ended:\n%s", describe(evs))
		}
		if _, err := confirmation.Answer(h.ctx(), h.bus, "heed/test", cid, events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "user:alice", Channel: "test"}); err != nil {
			t.Fatal(err)
		}
		evs = h.waitEnd(id, events.RunCompleted)
		if got := steps(t, evs); !reflect.DeepEqual(got, allFour) {
			t.Errorf("steps:\n got  %v\n want %v", got, allFour)
		}
		resumed := decode[events.RunResumedData](t, ofType(evs, events.RunResumed)[0])
		if resumed.Choice != "proceed" || resumed.Method != events.MethodUser || resumed.By != "user:alice" || resumed.Index != 2 {
			t.Errorf("run.resumed = %+v", resumed)
		}
		done := decode[events.RunCompletedData](t, ofType(evs, events.RunCompleted)[0])
		if mr, _ := done.Outputs["mr"].(map[string]any); mr["environment"] != "stage" {
			t.Errorf("outputs.mr = %#v", done.Outputs["mr"])
		}
		// A second answer is refused and changes nothing.
		_, err := confirmation.Answer(h.ctx(), h.bus, "heed/test", cid, events.ConfirmAnsweredData{Choice: "cancel", Method: events.MethodUser, By: "user:bob"})
		var already *confirmation.AlreadyAnswered
		if !errors.As(err, &already) || already.Winner.By != "user:alice" {
			t.Errorf("second answer: %v", err)
		}
	})

	t.Run("cancel answer cancels", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		id := h.start(src, map[string]any{"commit_sha": sha40}, false)
		h.waitRun(id, 30*time.Second, "run.paused", hasType(events.RunPaused))
		if _, err := confirmation.Answer(h.ctx(), h.bus, "heed/test", runner.ConfirmID(id, 2, 1), events.ConfirmAnsweredData{Choice: "cancel", Method: events.MethodUser, By: "user:alice"}); err != nil {
			t.Fatal(err)
		}
		evs := h.waitEnd(id, events.RunCancelled)
		c := decode[events.RunCancelledData](t, ofType(evs, events.RunCancelled)[0])
		if c.By != "user:alice" || c.Step != "confirm_release" || c.Index == nil || *c.Index != 2 || !strings.Contains(c.Reason, `"cancel" chosen`) {
			t.Errorf("run.cancelled = %+v", c)
		}
		// Asserting an absence: the parallel subtests keep the shared runner
		// busy, so there is no moment it is idle to wait for. It acts on an
		// event within milliseconds; 300 ms is a wide margin.
		time.Sleep(300 * time.Millisecond)
		evs = h.runLog(id)
		if got := steps(t, evs); !reflect.DeepEqual(got, allFour[:5]) {
			t.Errorf("steps after cancel: %v", got)
		}
		if n := len(ofType(evs, events.RunCompleted)); n != 0 {
			t.Errorf("%d run.completed after a cancel", n)
		}
	})

	t.Run("continue command answers for an agent", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		id := h.start(src, map[string]any{"commit_sha": sha40}, false)
		h.waitRun(id, 30*time.Second, "run.paused", hasType(events.RunPaused))
		reply := h.command(command.RunContinue, command.ContinueRun{RunID: id, Choice: "proceed", Reason: "image verified", By: "agent:claude"})
		if reply.ConfirmID != runner.ConfirmID(id, 2, 1) || reply.Status != runstate.StatusRunning {
			t.Errorf("continue reply %+v", reply)
		}
		evs := h.waitEnd(id, events.RunCompleted)
		resumed := decode[events.RunResumedData](t, ofType(evs, events.RunResumed)[0])
		if resumed.Method != events.MethodAgent || resumed.By != "agent:claude" || resumed.Reason != "image verified" {
			t.Errorf("run.resumed = %+v", resumed)
		}
	})

	t.Run("short sha fails then retry completes", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		id := h.start(src, map[string]any{"commit_sha": "0123abcdef"}, true)
		evs := h.waitEnd(id, events.RunFailed)
		if got, want := steps(t, evs), []string{"step.started:0/1", "step.failed:0/1"}; !reflect.DeepEqual(got, want) {
			t.Errorf("steps %v, want %v", got, want)
		}
		sf := decode[events.StepFailedData](t, ofType(evs, events.RunStepFailed)[0])
		const manifest = "manifest unknown: quay.io/app-sre/backend:0123abcdef"
		if sf.Error.Kind != "exit" || sf.Error.Message != manifest || sf.Error.ExitCode == nil || *sf.Error.ExitCode != 1 || sf.Tool != "quay_check" || sf.Args["tag"] != "0123abcdef" {
			t.Errorf("step.failed = %+v", sf)
		}
		rf := decode[events.RunFailedData](t, ofType(evs, events.RunFailed)[0])
		if rf.Step != "check_image" || rf.Index == nil || *rf.Index != 0 || rf.Error.Message != manifest {
			t.Errorf("run.failed = %+v", rf)
		}

		reply := h.command(command.RunRetry, command.RetryStep{RunID: id, Args: map[string]any{"tag": sha40}, Reason: "use the full sha", By: "agent:fixer"})
		if reply.RunID != id || reply.Status != runstate.StatusRunning {
			t.Errorf("retry reply %+v", reply)
		}
		evs = h.waitEnd(id, events.RunCompleted)
		want := append([]string{"step.started:0/1", "step.failed:0/1", "step.started:0/2", "step.completed:0/2"}, allFour[2:]...)
		if got := steps(t, evs); !reflect.DeepEqual(got, want) {
			t.Errorf("steps:\n got  %v\n want %v", got, want)
		}
		var retried *events.StepStartedData
		for _, ev := range ofType(evs, events.RunStepStarted) {
			if d := decode[events.StepStartedData](t, ev); d.Index == 0 && d.Attempt == 2 {
				retried = &d
			}
		}
		if retried == nil || retried.Args["tag"] != sha40 || retried.RetryOf != id+"/s0/a1/failed" || retried.IdempotencyKey != tool.IdempotencyKey(id, 0, 2) {
			t.Errorf("retried attempt = %+v", retried)
		}
		resumed := ofType(evs, events.RunResumed)
		if len(resumed) != 2 { // the retry and the confirmation
			t.Fatalf("%d run.resumed:\n%s", len(resumed), describe(evs))
		}
		if r := decode[events.RunResumedData](t, resumed[0]); r.By != "agent:fixer" || r.Reason != "use the full sha" || r.Index != 0 {
			t.Errorf("resumed by retry = %+v", r)
		}
		done := decode[events.RunCompletedData](t, ofType(evs, events.RunCompleted)[0])
		if img, _ := done.Outputs["image"].(map[string]any); img["image"] != "quay.io/app-sre/backend:"+sha40 {
			t.Errorf("outputs.image = %#v", done.Outputs["image"])
		}
		// Nothing left to retry.
		m := h.request(command.RunRetry, []byte(`{"run_id":"`+id+`"}`))
		if code := m.Header.Get(micro.ErrorCodeHeader); code != string(events.CodeConflict) {
			t.Errorf("retry of a completed run: %q %s", code, m.Data)
		}
	})
}

// TestRetryThatFailsAgain: a retry with args that still fail fails the run
// again, with its own run.failed, and a later retry can still fix it.
func TestRetryThatFailsAgain(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	id := h.start(releaseProd(t), map[string]any{"commit_sha": "0123abcdef"}, true)
	h.waitEnd(id, events.RunFailed)
	// A step the skill does not have is the caller's mistake, not a state
	// of the run.
	m := h.request(command.RunRetry, []byte(`{"run_id":"`+id+`","step":"check_imag"}`))
	if code, msg := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader); code != string(events.CodeInvalidRequest) ||
		!strings.Contains(msg, `has no step "check_imag"`) || !strings.Contains(msg, `(did you mean "check_image"?)`) {
		t.Errorf("retry of a step the skill does not have: %s: %s", code, msg)
	}
	for attempt, tag := range []string{"0123abcdef0", "0123abcdef01"} {
		h.command(command.RunRetry, command.RetryStep{RunID: id, Args: map[string]any{"tag": tag}})
		evs := h.waitEnd(id, events.RunFailed)
		failures := ofType(evs, events.RunFailed)
		if len(failures) != attempt+2 {
			t.Fatalf("after retry %d the log has %d run.failed:\n%s", attempt+1, len(failures), describe(evs))
		}
		rf := decode[events.RunFailedData](t, failures[len(failures)-1])
		if want := "manifest unknown: quay.io/app-sre/backend:" + tag; rf.Error.Message != want {
			t.Errorf("run.failed after retry %d: %q, want %q", attempt+1, rf.Error.Message, want)
		}
	}
	// A retry naming the attempt it corrects, sent again after that
	// attempt was retried (and its retry failed too), is a conflict, not a
	// retry of the later failure.
	m = h.request(command.RunRetry, []byte(`{"run_id":"`+id+`","attempt":2,"args":{"tag":"0123abcdef0"}}`))
	if code, msg := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader); code != string(events.CodeConflict) || !strings.Contains(msg, "attempt 2 is not its last failure (attempt 3 is)") {
		t.Errorf("a stale retry naming attempt 2: %s: %s", code, msg)
	}
	h.command(command.RunRetry, command.RetryStep{RunID: id, Args: map[string]any{"tag": sha40}, Attempt: 3})
	evs := h.waitEnd(id, events.RunCompleted)
	want := []string{"step.started:0/1", "step.failed:0/1", "step.started:0/2", "step.failed:0/2", "step.started:0/3", "step.failed:0/3", "step.started:0/4", "step.completed:0/4"}
	if got := steps(t, evs); !reflect.DeepEqual(got[:len(want)], want) {
		t.Errorf("steps %v, want %v…", got, want)
	}
}

// TestResumeAwaitsRetry: the retry command appends run.resumed, then the
// new attempt's step.started. A runner that sees the resume first waits for
// the attempt; it does not fail the run again (a copy of the old failure
// would be stored once the duplicate window has passed).
func TestResumeAwaitsRetry(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	id := h.start(releaseProd(t), map[string]any{"commit_sha": "0123abcdef"}, true)
	h.waitEnd(id, events.RunFailed)

	// A short duplicate window, so that a republished event would show.
	ctx := h.ctx()
	stream, err := h.bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.Duplicates = 200 * time.Millisecond
	if _, err := h.bus.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// The server forgets ids after the (lowered) duplicate window: a timer
	// of the server's, with nothing to wait on but the clock. Twice the
	// window is enough.
	time.Sleep(400 * time.Millisecond)

	publish := func(typ events.Type, eventID string, data any) {
		t.Helper()
		ev, err := events.NewEvent(typ, id, id+"/"+eventID, "heed/test", data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.bus.Publish(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	publish(events.RunResumed, "s0/a2/resumed", events.RunResumedData{Step: "check_image", Index: 0, Method: events.MethodAgent, By: "agent:test"})
	h.consumerIdle(h.lastSeq())
	evs := h.runLog(id)
	if n := len(ofType(evs, events.RunFailed)); n != 1 {
		t.Fatalf("the resumed run was failed again (%d run.failed):\n%s", n, describe(evs))
	}
	publish(events.RunStepStarted, "s0/a2/started", events.StepStartedData{Step: "check_image", Index: 0, Attempt: 2, Kind: "tool", Tool: "quay_check",
		Args: map[string]any{"tag": sha40}, IdempotencyKey: tool.IdempotencyKey(id, 0, 2), RetryOf: "test"})
	evs = h.waitEnd(id, events.RunCompleted)
	if n := len(ofType(evs, events.RunFailed)); n != 1 {
		t.Errorf("%d run.failed:\n%s", n, describe(evs))
	}
}

const flakySkill = `name: flaky
steps:
  - name: call
    tool: always_fails
    on_error: retry
    retry: {attempts: 3, backoff: 10ms}
  - name: never
    compute: 1
`

const continueSkill = `name: carry_on
steps:
  - name: bad
    tool: always_fails
    on_error: continue
  - name: after
    compute: steps.bad.status + ":" + steps.bad.error
    output: after
`

const conditionSkill = `name: cond
inputs:
  go: {type: boolean, default: false}
steps:
  - name: maybe
    condition: inputs.go
    tool: always_fails
  - name: done
    compute: steps.maybe.status
    output: result
`

const longSkill = `name: long
inputs:
  pidfile: string
steps:
  - name: wait
    tool: sleeper
    args: {duration: 30s, pidfile: "{{ inputs.pidfile }}"}
  - name: after
    compute: 1
`

// TestStepFlow covers on_error, conditions and the cancel command.
func TestStepFlow(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})

	t.Run("on_error retry stops after the last attempt", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		id := h.start(flakySkill, nil, false)
		evs := h.waitEnd(id, events.RunFailed)
		want := []string{"step.started:0/1", "step.failed:0/1", "step.started:0/2", "step.failed:0/2", "step.started:0/3", "step.failed:0/3"}
		if got := steps(t, evs); !reflect.DeepEqual(got, want) {
			t.Errorf("steps:\n got  %v\n want %v", got, want)
		}
		for k, ev := range ofType(evs, events.RunStepStarted) {
			if d := decode[events.StepStartedData](t, ev); d.IdempotencyKey != tool.IdempotencyKey(id, 0, k+1) {
				t.Errorf("attempt %d key %q", k+1, d.IdempotencyKey)
			}
		}
		for k, ev := range ofType(evs, events.RunStepFailed) {
			if d := decode[events.StepFailedData](t, ev); d.Error.Message != fmt.Sprintf("boom %d", k+1) || d.Error.Kind != "exit" {
				t.Errorf("attempt %d error %+v", k+1, d.Error)
			}
		}
		rf := decode[events.RunFailedData](t, ofType(evs, events.RunFailed)[0])
		if rf.Step != "call" || rf.Error.Message != "boom 3" {
			t.Errorf("run.failed = %+v", rf)
		}
		// Asserting an absence: the parallel subtests keep the shared runner
		// busy, so there is no moment it is idle to wait for. It acts on an
		// event within milliseconds; 300 ms is a wide margin.
		time.Sleep(300 * time.Millisecond)
		if got := steps(t, h.runLog(id)); len(got) != len(want) {
			t.Errorf("steps after the run failed: %v", got)
		}
	})

	t.Run("on_error continue goes on", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		id := h.start(continueSkill, nil, false)
		evs := h.waitEnd(id, events.RunCompleted)
		want := []string{"step.started:0/1", "step.failed:0/1", "step.started:1/1", "step.completed:1/1"}
		if got := steps(t, evs); !reflect.DeepEqual(got, want) {
			t.Errorf("steps %v, want %v", got, want)
		}
		done := decode[events.RunCompletedData](t, ofType(evs, events.RunCompleted)[0])
		if done.Outputs["after"] != "failed:boom 1" {
			t.Errorf("outputs = %#v", done.Outputs)
		}
	})

	t.Run("false condition skips", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		id := h.start(conditionSkill, nil, false)
		evs := h.waitEnd(id, events.RunCompleted)
		if got, want := steps(t, evs), []string{"step.skipped:0", "step.started:1/1", "step.completed:1/1"}; !reflect.DeepEqual(got, want) {
			t.Errorf("steps %v, want %v", got, want)
		}
		sk := decode[events.StepSkippedData](t, ofType(evs, events.RunStepSkipped)[0])
		if sk.Step != "maybe" || sk.Reason != "condition is false: inputs.go" {
			t.Errorf("step.skipped = %+v", sk)
		}
		if done := decode[events.RunCompletedData](t, ofType(evs, events.RunCompleted)[0]); done.Outputs["result"] != "skipped" {
			t.Errorf("outputs = %#v", done.Outputs)
		}
		// The same skill with a true condition runs the step (and fails).
		id = h.start(conditionSkill, map[string]any{"go": "true"}, false)
		evs = h.waitEnd(id, events.RunFailed)
		if got, want := steps(t, evs), []string{"step.started:0/1", "step.failed:0/1"}; !reflect.DeepEqual(got, want) {
			t.Errorf("steps with go=true: %v", got)
		}
	})

	t.Run("cancel stops a running tool", func(t *testing.T) {
		t.Parallel()
		h := h.with(t)
		pidfile := filepath.Join(t.TempDir(), "pid")
		id := h.start(longSkill, map[string]any{"pidfile": pidfile}, false)
		var pid int
		deadline := time.Now().Add(20 * time.Second)
		for pid == 0 {
			if b, err := os.ReadFile(pidfile); err == nil {
				pid, _ = strconv.Atoi(string(b))
			}
			if time.Now().After(deadline) {
				t.Fatalf("the tool never started; log:\n%s", describe(h.runLog(id)))
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancelled := time.Now()
		reply := h.command(command.RunCancel, command.CancelRun{RunID: id, Reason: "wrong target", By: "user:bob"})
		if reply.Status != runstate.StatusCancelled {
			t.Errorf("cancel reply %+v", reply)
		}
		evs := h.waitRun(id, 10*time.Second, "step.failed", hasType(events.RunStepFailed))
		for alive(pid) {
			if time.Since(cancelled) > 5*time.Second {
				t.Fatalf("tool process %d still running %s after the cancel", pid, time.Since(cancelled))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if took := time.Since(cancelled); took > 4*time.Second {
			t.Errorf("the tool stopped %s after the cancel", took)
		}
		if ended(evs) != events.RunCancelled {
			t.Errorf("run did not end cancelled:\n%s", describe(evs))
		}
		c := decode[events.RunCancelledData](t, ofType(evs, events.RunCancelled)[0])
		if c.By != "user:bob" || c.Reason != "wrong target" {
			t.Errorf("run.cancelled = %+v", c)
		}
		sf := decode[events.StepFailedData](t, ofType(evs, events.RunStepFailed)[0])
		if sf.Error.Kind != "cancelled" || sf.Index != 0 {
			t.Errorf("step.failed = %+v", sf)
		}
		// Asserting an absence: the parallel subtests keep the shared runner
		// busy, so there is no moment it is idle to wait for. It acts on an
		// event within milliseconds; 300 ms is a wide margin.
		time.Sleep(300 * time.Millisecond)
		if got := steps(t, h.runLog(id)); !reflect.DeepEqual(got, []string{"step.started:0/1", "step.failed:0/1"}) {
			t.Errorf("steps after cancel: %v", got)
		}
		// A cancelled run cannot be cancelled again.
		m := h.request(command.RunCancel, []byte(`{"run_id":"`+id+`"}`))
		if code := m.Header.Get(micro.ErrorCodeHeader); code != string(events.CodeConflict) {
			t.Errorf("second cancel: %q %s", code, m.Data)
		}
	})
}

// TestHealerSilent: with healing on and no healer, a failed tool step
// waits HealWait for a verdict, then the runner gives up and on_error
// applies.
func TestHealerSilent(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: 300 * time.Millisecond})
	id := h.start(continueSkill, nil, false)
	evs := h.waitEnd(id, events.RunCompleted)
	gave := ofType(evs, events.HealGaveUp)
	if len(gave) != 1 {
		t.Fatalf("%d heal.gave_up:\n%s", len(gave), describe(evs))
	}
	g := decode[events.HealGaveUpData](t, gave[0])
	if g.Index != 0 || g.Attempt != 1 || !strings.Contains(g.Reason, "within 300ms") {
		t.Errorf("heal.gave_up = %+v", g)
	}
	failed := ofType(evs, events.RunStepFailed)[0]
	if wait := gave[0].Time().Sub(failed.Time()); wait < 250*time.Millisecond {
		t.Errorf("gave up %s after the failure, before HealWait", wait)
	}
	if done := decode[events.RunCompletedData](t, ofType(evs, events.RunCompleted)[0]); done.Outputs["after"] != "failed:boom 1" {
		t.Errorf("outputs = %#v", done.Outputs)
	}
}

// TestAgentDrivenRun: a run an outside agent publishes itself, with plain
// NATS messages, is recorded but never driven by the runner.
func TestAgentDrivenRun(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	js := h.bus.JetStream()
	const id = "agentrun1"
	const source = "urn:agent:claude"
	seqNo := 0
	publish := func(subject, typ, aggregate string, data string) uint64 {
		t.Helper()
		seqNo++
		m := nats.NewMsg(subject)
		m.Header.Set("ce-specversion", "1.0")
		m.Header.Set("ce-id", fmt.Sprintf("agent-%d", seqNo))
		m.Header.Set("ce-source", source)
		m.Header.Set("ce-type", typ)
		m.Header.Set("ce-subject", aggregate)
		m.Header.Set("ce-time", time.Now().UTC().Format(time.RFC3339Nano))
		m.Header.Set("Content-Type", "application/json")
		m.Data = []byte(data)
		ack, err := js.PublishMsg(h.ctx(), m)
		if err != nil {
			t.Fatalf("publish %s: %v", typ, err)
		}
		return ack.Sequence
	}
	run := "heed.run." + id + "."
	publish(run+"started", "heed.run.started", id, `{"skill":"manual_fix","driver":"agent","agent":"claude","steps":["look","fix"]}`)
	publish(run+"step.started", "heed.run.step.started", id, `{"step":"look","index":0,"attempt":1,"kind":"tool","tool":"sleeper","args":{"duration":"1ms"}}`)
	publish(run+"step.completed", "heed.run.step.completed", id, `{"step":"look","index":0,"attempt":1,"output":{"ok":true}}`)
	publish(run+"step.started", "heed.run.step.started", id, `{"step":"fix","index":1,"attempt":1,"kind":"tool","tool":"always_fails"}`)
	publish(run+"step.failed", "heed.run.step.failed", id, `{"step":"fix","index":1,"attempt":1,"error":{"message":"boom","kind":"exit"}}`)
	publish("heed.confirm.agentq1.requested", "heed.confirm.requested", "agentq1", `{"message":"retry the fix?","options":[{"label":"Yes","value":"yes"},{"label":"No","value":"no"}],"requester":"agent:claude","run_id":"`+id+`","yes":true}`)
	publish(run+"paused", "heed.run.paused", id, `{"reason":"awaiting_confirmation","step":"fix","index":1,"confirm_id":"agentq1"}`)
	publish("heed.confirm.agentq1.answered", "heed.confirm.answered", "agentq1", `{"choice":"yes","method":"user","by":"user:alice","run_id":"`+id+`"}`)
	publish(run+"resumed", "heed.run.resumed", id, `{"step":"fix","index":1,"choice":"yes"}`)
	publish(run+"step.started", "heed.run.step.started", id, `{"step":"fix","index":1,"attempt":2,"kind":"tool","tool":"always_fails"}`)
	last := publish(run+"step.started", "heed.run.step.started", id, `{"step":"extra","index":2,"attempt":1,"kind":"compute"}`)
	h.consumerIdle(last)

	evs := h.runLog(id)
	if len(evs) != 9 {
		t.Errorf("%d run events, want the agent's 9:\n%s", len(evs), describe(evs))
	}
	for _, ev := range evs {
		if ev.Source() != source {
			t.Errorf("the runner acted on an agent's run: %s from %s %s", ev.Type(), ev.Source(), ev.Data())
		}
	}
	if n := h.deadLetters(); n != 0 {
		t.Errorf("%d dead letters: the agent's events were refused", n)
	}
	// Retrying a step is the agent's business.
	m := h.request(command.RunRetry, []byte(`{"run_id":"`+id+`"}`))
	if code := m.Header.Get(micro.ErrorCodeHeader); code != string(events.CodeConflict) || !strings.Contains(string(m.Data), "not driven by the runner") {
		t.Errorf("retry of an agent's run: %q %s", code, m.Data)
	}
	// A cancel from the command API still works on it: the log is shared.
	reply := h.command(command.RunCancel, command.CancelRun{RunID: id, By: "user:alice"})
	if reply.Status != runstate.StatusCancelled {
		t.Errorf("cancel reply %+v", reply)
	}
	h.waitRun(id, 5*time.Second, "run.cancelled", hasType(events.RunCancelled))
	h.consumerIdle(h.lastSeq())
	evs = h.runLog(id)
	if len(evs) != 10 || events.Type(evs[9].Type()) != events.RunCancelled {
		t.Errorf("after the cancel the run has:\n%s", describe(evs))
	}
}

// TestBadCommands: malformed or invalid requests get a micro error with
// code invalid_request and a readable message, and leave no trace in the
// log.
func TestBadCommands(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	start := func(source string, inputs map[string]any) string {
		b, _ := json.Marshal(map[string]any{"skill": map[string]any{"source": source, "file": "bad.yaml"}, "inputs": inputs})
		return string(b)
	}
	lint := "name: t\ninputs:\n  environment: string\nsteps:\n  - name: c\n    confirm:\n      message: Deploy to {{ enviroment }}?\n"
	cases := []struct {
		name, subject, body string
		code                events.Code
		want                []string
	}{
		{"invalid JSON", command.RunStart, `{"skill": {`, events.CodeInvalidRequest, []string{"heed.cmd.run.start: the request is not JSON"}},
		{"not an object", command.RunStart, `[1,2]`, events.CodeInvalidRequest, []string{"expected object, but got array"}},
		{"unknown field", command.RunStart, `{"skill":{"source":"x"},"colour":"red"}`, events.CodeInvalidRequest, []string{`'colour' not allowed`}},
		{"no skill", command.RunStart, `{"inputs":{}}`, events.CodeInvalidRequest, []string{`missing properties: 'skill'`}},
		{"empty body", command.RunStart, ``, events.CodeInvalidRequest, []string{`the request is empty`}},
		{"empty source", command.RunStart, `{"skill":{"source":"  "}}`, events.CodeInvalidRequest, []string{"skill.source is empty"}},
		{"lint errors", command.RunStart, start(lint, nil), events.CodeInvalidRequest, []string{"skill does not load", "bad.yaml:7:", "unknown name enviroment"}},
		{"missing required input", command.RunStart, start(releaseProd(t), nil), events.CodeInvalidRequest, []string{`skill release_prod: missing required input "commit_sha"`}},
		{"unknown input", command.RunStart, start(releaseProd(t), map[string]any{"commit_sha": sha40, "enviroment": "prod"}), events.CodeInvalidRequest, []string{`unknown input "enviroment"`}},
		{"bad input type", command.RunStart, start(conditionSkill, map[string]any{"go": "perhaps"}), events.CodeInvalidRequest, []string{"input go: perhaps is not true or false"}},
		{"unknown tool", command.RunStart, start("name: t\nsteps:\n  - name: a\n    tool: no_such_tool\n", nil), events.CodeInvalidRequest, []string{"uses tools the runner does not have: no_such_tool", "tools file:"}},
		{"retry unknown field", command.RunRetry, `{"run_id":"abc","argz":{}}`, events.CodeInvalidRequest, []string{`'argz' not allowed`}},
		{"retry bad run id", command.RunRetry, `{"run_id":"../etc"}`, events.CodeInvalidRequest, []string{`at /run_id: does not match pattern`}},
		{"continue bad JSON", command.RunContinue, `{"run_id":`, events.CodeInvalidRequest, []string{"the request is not JSON"}},
		{"cancel empty run id", command.RunCancel, `{}`, events.CodeInvalidRequest, []string{`missing properties: 'run_id'`}},
		{"cancel unknown run", command.RunCancel, `{"run_id":"nosuchrun"}`, events.CodeNotFound, []string{`no run "nosuchrun"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			m := h.request(tc.subject, []byte(tc.body))
			code := m.Header.Get(micro.ErrorCodeHeader)
			desc := m.Header.Get(micro.ErrorHeader)
			if code != string(tc.code) {
				t.Fatalf("code %q (%s), want %s; reply %s", code, desc, tc.code, m.Data)
			}
			if strings.ContainsAny(desc, "\r\n") {
				t.Errorf("error header spans lines: %q", desc)
			}
			var body command.ErrorReply
			if err := json.Unmarshal(m.Data, &body); err != nil || body.Code != tc.code {
				t.Errorf("error body %q is not an error reply with code %s (%v)", m.Data, tc.code, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(body.Message, w) || !strings.Contains(desc, w) {
					t.Errorf("error %q / %q does not say %q", desc, body.Message, w)
				}
			}
		})
	}
	if evs := h.log("heed.run.>"); len(evs) != 0 {
		t.Errorf("refused commands left events:\n%s", describe(evs))
	}
}
