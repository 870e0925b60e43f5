package runner_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go/micro"
)

// TestAgentPath: the run commands on an agent's own path, called with
// plain NATS requests as any client would. A run started on
// heed.cmd.as.alice.run.start belongs to alice: she follows it with
// heed.cmd.as.alice.run.get (a long poll that wakes when an event comes)
// and continues it; bob, on his own path, is refused every command on it
// with code forbidden — the same refusal as for a run that does not exist.
// Request ids are each agent's own.
func TestAgentPath(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	const skill = `name: ask_then_work
steps:
  - name: approve
    confirm:
      message: "Go ahead?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
  - name: work
    tool: sleeper
    args: {duration: 50ms, pidfile: ""}
`
	call := func(agent, subject string, req any) (json.RawMessage, string) {
		t.Helper()
		body, _ := json.Marshal(req)
		m := h.request(command.AsAgent(agent, subject), body)
		return m.Data, m.Header.Get(micro.ErrorCodeHeader)
	}
	start := func(agent, requestID string) command.RunReply {
		t.Helper()
		req := command.StartRun{RequestID: requestID}
		req.Skill.Source = skill
		out, code := call(agent, command.RunStart, req)
		var reply command.RunReply
		if code != "" || json.Unmarshal(out, &reply) != nil || reply.Status == "" {
			t.Fatalf("%s starts: %s %s", agent, code, out)
		}
		return reply
	}
	get := func(agent string, req command.GetRun) command.RunEvents {
		t.Helper()
		out, code := call(agent, command.RunGet, req)
		var reply command.RunEvents
		if code != "" || json.Unmarshal(out, &reply) != nil {
			t.Fatalf("%s reads %s: %s %s", agent, req.RunID, code, out)
		}
		return reply
	}

	id := start("alice", "job-1").RunID
	if again := start("alice", "job-1").RunID; again != id {
		t.Fatalf("alice's retried start made another run: %s, then %s", id, again)
	}
	if bobs := start("bob", "job-1").RunID; bobs == id {
		t.Fatalf("bob's request id job-1 mapped to alice's run %s", id)
	}

	// alice follows her run until it pauses, one long poll at a time.
	var seen []string
	var after uint64
	for !strings.HasSuffix(strings.Join(seen, " "), "heed.run.paused") {
		began := time.Now()
		r := get("alice", command.GetRun{RunID: id, After: after, WaitMS: 5000})
		if r.Agent != "alice" || r.RunID != id {
			t.Fatalf("reply %+v", r)
		}
		if len(r.Events) == 0 {
			t.Fatalf("a long poll came back empty after %s with the run %s", time.Since(began), r.Status)
		}
		for _, e := range r.Events {
			var ev events.Event
			if err := json.Unmarshal(e.Event, &ev); err != nil || e.Seq <= after {
				t.Fatalf("event %s at %d (after %d): %v", e.Event, e.Seq, after, err)
			}
			seen = append(seen, ev.Type())
		}
		after = r.LastSeq
	}
	// Nothing new: the poll waits its time out and comes back empty.
	began := time.Now()
	if r := get("alice", command.GetRun{RunID: id, After: after, WaitMS: 300}); len(r.Events) != 0 || r.Status != runstate.StatusPaused || time.Since(began) < 250*time.Millisecond {
		t.Fatalf("an idle poll: %+v after %s", r, time.Since(began))
	}

	// bob may do nothing with it; a run that does not exist is refused
	// the same way.
	for _, c := range []struct {
		subject string
		req     any
	}{
		{command.RunGet, command.GetRun{RunID: id}},
		{command.RunContinue, command.ContinueRun{RunID: id, Choice: "proceed"}},
		{command.RunCancel, command.CancelRun{RunID: id}},
		{command.RunRetry, command.RetryStep{RunID: id, Step: "work"}},
		{command.RunGet, command.GetRun{RunID: "no-such-run"}},
	} {
		out, code := call("bob", c.subject, c.req)
		if code != string(events.CodeForbidden) || !strings.Contains(string(out), "is not one of agent bob's runs") {
			t.Errorf("bob's %s: %s %s, want forbidden", c.subject, code, out)
		}
	}
	// On her own path, alice cannot start a run for someone else.
	req := command.StartRun{Agent: "bob"}
	req.Skill.Source = skill
	if out, code := call("alice", command.RunStart, req); code != string(events.CodeForbidden) {
		t.Errorf("alice starting a run of bob's: %s %s", code, out)
	}

	// On her own path alice answers as alice: naming someone else as who
	// answered is refused (an approver's name would pass the approvers).
	if out, code := call("alice", command.RunContinue, command.ContinueRun{RunID: id, Choice: "proceed", By: "user:boss"}); code != string(events.CodeForbidden) || !strings.Contains(string(out), `you act as alice; by \"user:boss\" is someone else`) {
		t.Errorf("alice continuing as user:boss: %s %s, want forbidden", code, out)
	}

	// alice continues her run; it completes, and her poll sees the end.
	if out, code := call("alice", command.RunContinue, command.ContinueRun{RunID: id, Choice: "proceed"}); code != "" {
		t.Fatalf("alice continues: %s %s", code, out)
	}
	for {
		r := get("alice", command.GetRun{RunID: id, After: after, WaitMS: 5000})
		after = r.LastSeq
		if runstate.Terminal(r.Status) {
			if r.Status != runstate.StatusCompleted {
				t.Fatalf("alice's run ended %s", r.Status)
			}
			break
		}
	}
	// The plain command reads any run (for the roles that may call it).
	if r := h.getRun(command.GetRun{RunID: id}); r.Agent != "alice" || r.Status != runstate.StatusCompleted || len(r.Events) < 8 {
		t.Fatalf("heed.cmd.run.get: %+v", r)
	}
}

func (h *harness) getRun(req command.GetRun) command.RunEvents {
	h.t.Helper()
	body, _ := json.Marshal(req)
	m := h.request(command.RunGet, body)
	var r command.RunEvents
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" || json.Unmarshal(m.Data, &r) != nil {
		h.t.Fatalf("heed.cmd.run.get: %s %s", code, m.Data)
	}
	return r
}

// TestRunGetRefusesBadRequests: heed.cmd.run.get and the agent path,
// called with bad JSON as any client might, answer invalid_request with
// the reason and read nothing.
func TestRunGetRefusesBadRequests(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	for _, c := range []struct{ subject, body, want string }{
		{command.RunGet, `{}`, "run_id"},
		{command.RunGet, `{"run_id": "r1", "wait_ms": 20000}`, "wait_ms"},
		{command.RunGet, `{"run_id": "r1", "after": -1}`, "after"},
		{command.RunGet, `{"run_id": "r1", "extra": true}`, "extra"},
		{command.RunGet, `not json`, ""},
		{command.RunRetry, `{"run_id": "r1", "attempt": 0}`, "attempt"},
		{command.RunRetry, `{"run_id": "r1", "attempt": "2"}`, "attempt"},
		{command.AsAgent("alice", command.RunGet), `{"run_id": "no such/run"}`, "run_id"},
		{"heed.cmd.as.not:a-token.run.get", `{"run_id": "r1"}`, "agent's path"},
	} {
		m := h.request(c.subject, []byte(c.body))
		if code := m.Header.Get(micro.ErrorCodeHeader); code != string(events.CodeInvalidRequest) || !strings.Contains(string(m.Data), c.want) {
			t.Errorf("%s %s: %s %s, want invalid_request naming %q", c.subject, c.body, code, m.Data, c.want)
		}
	}
}

// A confirmation that names its approvers is not answered by an agent's
// continue, whoever the continue says answered: only an approver's answer
// (the answer command) moves the run on.
func TestContinueIsNoApprover(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	id := h.start(gatedSkill, nil, false)
	h.waitPaused(id)
	body, _ := json.Marshal(command.ContinueRun{RunID: id, Choice: "proceed", By: "user:boss"})
	m := h.request(command.RunContinue, body)
	code := m.Header.Get(micro.ErrorCodeHeader)
	if code == "" || !strings.Contains(string(m.Data), "does not count for a confirmation that names its approvers") {
		t.Errorf("a continue naming the approver: %q %s, want a refusal", code, m.Data)
	}
	time.Sleep(300 * time.Millisecond)
	if r := h.getRun(command.GetRun{RunID: id}); r.Status != runstate.StatusPaused {
		t.Fatalf("the run is %s after an agent's continue; it waits for user:boss", r.Status)
	}
}

// A resumed event written by someone other than the runner (an agent may
// write run subjects, for the runs it drives itself) does not get a run
// the runner drives past its confirmation: the runner pauses it again at
// the same confirmation, saying why, and the approver's answer still
// moves it on.
func TestForgedResumeDoesNotPassAConfirmation(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	id := h.start(gatedSkill, nil, false)
	paused := func(evs []*events.Event) int {
		n := 0
		for _, ev := range evs {
			if ev.Type() == string(events.RunPaused) {
				n++
			}
		}
		return n
	}
	h.waitRun(id, 10*time.Second, "the pause", func(evs []*events.Event) bool { return paused(evs) == 1 })
	confirmID := runner.ConfirmID(id, 0, 1)

	// As any NATS client: a resumed event on the run's subject.
	forged, err := events.NewEvent(events.RunResumed, id, "forged-resume-1", "agent/sly", events.RunResumedData{
		Step: "gate", Index: 0, ConfirmID: confirmID, Choice: "proceed", Method: events.MethodUser, By: "user:boss"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.bus.Publish(h.ctx(), &forged); err != nil {
		t.Fatal(err)
	}
	evs := h.waitRun(id, 10*time.Second, "the pause after the forged resume", func(evs []*events.Event) bool { return paused(evs) == 2 })
	last := evs[len(evs)-1]
	var p events.RunPausedData
	if err := json.Unmarshal(last.Data(), &p); err != nil || last.Type() != string(events.RunPaused) || p.ConfirmID != confirmID || !strings.Contains(p.Message, "the confirmation has no such answer") {
		t.Fatalf("after the forged resume: %s %+v (%v)\n%s", last.Type(), p, err, describe(evs))
	}
	h.stillAtTheGateUntilBossAnswers(id, confirmID)
}

// A request id names one run: the same request again gets that run as it
// stands, another skill or other inputs under the id are a conflict (they
// used to get the first run's id back, as if started).
func TestRequestIDNamesOneRun(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	const ask = `name: asks
steps:
  - name: gate
    confirm:
      message: "Go?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: 600
`
	startReq := func(source string, inputs map[string]any) (command.RunReply, string, string) {
		req := command.StartRun{RequestID: "dup-1", Inputs: inputs}
		req.Skill.Source = source
		body, _ := json.Marshal(req)
		m := h.request(command.RunStart, body)
		var r command.RunReply
		_ = json.Unmarshal(m.Data, &r)
		return r, m.Header.Get(micro.ErrorCodeHeader), string(m.Data)
	}
	first, code, out := startReq(ask, nil)
	if code != "" || first.Status != runstate.StatusRequested {
		t.Fatalf("first start: %s %s", code, out)
	}
	h.waitPaused(first.RunID)
	again, code, out := startReq(ask, nil)
	if code != "" || again.RunID != first.RunID || again.Status != runstate.StatusPaused {
		t.Errorf("the same start again: %s %s, want run %s as it stands (paused)", code, out, first.RunID)
	}
	other := strings.Replace(ask, "name: asks", "name: other_skill", 1)
	if _, code, out := startReq(other, nil); code != string(events.CodeConflict) || !strings.Contains(out, `request id \"dup-1\" started run `+first.RunID+" with other content") {
		t.Errorf("another skill under the same request id: %s %s, want conflict", code, out)
	}
	if n := len(h.log(events.RunRequested.Subject(first.RunID))); n != 1 {
		t.Errorf("%d run.requested events for one request id", n)
	}
}

// A run cancelled while it waits at a confirmation closes it: the question
// leaves every inbox, and an answer sent later is told who closed it.
func TestCancelClosesTheConfirmation(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	id := h.start(gatedSkill, nil, false)
	h.waitPaused(id)
	h.command(command.RunCancel, command.CancelRun{RunID: id, By: "user:ops", Reason: "wrong release"})
	cid := runner.ConfirmID(id, 0, 1)
	var answered []*events.Event
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		answered = nil
		for _, ev := range h.log(events.SubjectFilter("confirm", cid)) {
			if ev.Type() == string(events.ConfirmAnswered) {
				answered = append(answered, ev)
			}
		}
		if len(answered) != 1 {
			return fmt.Errorf("%d answers", len(answered))
		}
		return nil
	})
	var a events.ConfirmAnsweredData
	if err := json.Unmarshal(answered[0].Data(), &a); err != nil || a.Choice != "cancel" || a.Method != events.MethodError || a.By != runner.Source || !strings.Contains(a.Reason, "was cancelled by user:ops") {
		t.Fatalf("the closing answer: %+v (%v)", a, err)
	}
	body, _ := json.Marshal(command.AnswerConfirmation{ID: cid, Choice: "proceed", By: "user:boss"})
	m := h.request(command.ConfirmAnswer, body)
	if code := m.Header.Get(micro.ErrorCodeHeader); code != string(events.CodeConflict) || !strings.Contains(string(m.Data), runner.Source) {
		t.Errorf("an answer after the run was cancelled: %q %s, want conflict naming %s", code, m.Data, runner.Source)
	}
}

// gatedSkill waits at a confirmation only user:boss may answer, then
// computes a value.
const gatedSkill = `name: gated
steps:
  - name: gate
    confirm:
      message: "Drop the table?"
      approvers: [user:boss]
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: 600
  - name: after
    compute: "'dropped'"
`

// waitPaused waits until the run is paused (heed.cmd.run.get).
func (h *harness) waitPaused(id string) {
	h.t.Helper()
	eventstest.CheckFor(h.t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := h.getRun(command.GetRun{RunID: id}); r.Status != runstate.StatusPaused {
			return fmt.Errorf("run %s", r.Status)
		}
		return nil
	})
}

// The same for a confirm step's completion written by someone else: the
// runner does not take the step as answered, it pauses the run again at
// the confirmation.
func TestForgedCompletionDoesNotPassAConfirmation(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	id := h.start(gatedSkill, nil, false)
	h.waitPaused(id)
	confirmID := runner.ConfirmID(id, 0, 1)
	forged, err := events.NewEvent(events.RunStepCompleted, id, "forged-completion-1", "agent/sly", events.StepCompletedData{Step: "gate", Index: 0, Attempt: 1, Output: "proceed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.bus.Publish(h.ctx(), &forged); err != nil {
		t.Fatal(err)
	}
	h.waitRun(id, 10*time.Second, "the pause after the forged completion", func(evs []*events.Event) bool {
		last := evs[len(evs)-1]
		return last.Type() == string(events.RunPaused) && strings.Contains(string(last.Data()), "the confirmation has no such answer")
	})
	h.stillAtTheGateUntilBossAnswers(id, confirmID)
}

// A confirmation asked first by someone else under the id the runner will
// use (the ids are the run's, the step's and the attempt's) does not stand
// for the step: the step fails, saying why, and an answer there by anyone
// moves nothing.
func TestConfirmationAskedFirstBySomeoneElse(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	// The gate is step 1: mallory asks under its id while the run waits
	// at step 0 (the run's id is in the log for anyone who reads it).
	id := h.start(`name: two_gates
steps:
  - name: first
    confirm:
      message: "First?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: 600
`+strings.TrimPrefix(gatedSkill, "name: gated\nsteps:\n"), nil, false)
	h.waitPaused(id)
	gate := runner.ConfirmID(id, 1, 1)
	body, _ := json.Marshal(command.RequestConfirmation{ID: gate, ConfirmRequestedData: events.ConfirmRequestedData{
		Message: "Drop the table?", Options: []events.Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}}, Default: "cancel", TimeoutS: 600, RunID: id}})
	if m := h.request(command.ConfirmRequest, body); m.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("mallory's request: %s", m.Data)
	}
	answer := func(cid, by string) {
		body, _ := json.Marshal(command.AnswerConfirmation{ID: cid, Choice: "proceed", By: by})
		h.request(command.ConfirmAnswer, body)
	}
	answer(runner.ConfirmID(id, 0, 1), "user:alice")
	h.waitRun(id, 10*time.Second, "the pause at the gate", func(evs []*events.Event) bool {
		return strings.Contains(string(evs[len(evs)-1].Data()), gate) && evs[len(evs)-1].Type() == string(events.RunPaused)
	})
	answer(gate, "user:mallory") // taken by mallory's request, which names no approvers
	evs := h.waitRun(id, 10*time.Second, "the gate step failing", func(evs []*events.Event) bool {
		for _, ev := range evs {
			if ev.Type() == string(events.RunStepFailed) && strings.Contains(string(ev.Data()), "confirmation_taken") {
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond)
	for _, ev := range h.runLog(id) {
		if ev.Type() == string(events.RunCompleted) || ev.Type() == string(events.RunStepStarted) && strings.Contains(string(ev.Data()), `"after"`) {
			t.Fatalf("the run went on through a confirmation someone else asked first:\n%s", describe(evs))
		}
	}
}

// stillAtTheGateUntilBossAnswers checks that gatedSkill's run id has not
// gone on past its gate (after a forgery), then answers as user:boss and
// waits for it to complete.
func (h *harness) stillAtTheGateUntilBossAnswers(id, confirmID string) {
	h.t.Helper()
	time.Sleep(200 * time.Millisecond)
	for _, ev := range h.runLog(id) {
		if ev.Type() == string(events.RunCompleted) || ev.Type() == string(events.RunStepStarted) && strings.Contains(string(ev.Data()), `"after"`) {
			h.t.Fatalf("the run went on past its gate:\n%s", describe(h.runLog(id)))
		}
	}
	if r := h.getRun(command.GetRun{RunID: id}); r.Status != runstate.StatusPaused {
		h.t.Fatalf("run %s, want paused", r.Status)
	}
	body, _ := json.Marshal(command.AnswerConfirmation{ID: confirmID, Choice: "proceed", By: "user:boss"})
	if m := h.request(command.ConfirmAnswer, body); m.Header.Get(micro.ErrorCodeHeader) != "" {
		h.t.Fatalf("the approver's answer: %s", m.Data)
	}
	h.waitEnd(id, events.RunCompleted)
}

// A quorum step whose veto list is empty asks a confirmation whose request
// leaves it out (JSON): still the step's own, so its answers count.
func TestQuorumWithAnEmptyVetoIsTheStepsOwn(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	h.confirmRouter()
	id := h.start(`name: two_of_two
steps:
  - name: gate
    confirm:
      message: "Go?"
      approvers: [user:a, user:b]
      quorum: {required: 2, veto: []}
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: 600
`, nil, false)
	h.waitPaused(id)
	for _, by := range []string{"user:a", "user:b"} {
		body, _ := json.Marshal(command.AnswerConfirmation{ID: runner.ConfirmID(id, 0, 1), Choice: "proceed", By: by})
		if m := h.request(command.ConfirmAnswer, body); m.Header.Get(micro.ErrorCodeHeader) != "" {
			t.Fatalf("%s's vote: %s", by, m.Data)
		}
	}
	h.waitEnd(id, events.RunCompleted)
}

// TestRunGetPagesALargeRun: a run whose events pass a NATS message
// (70 steps of 16 KiB outputs) is read in pages: each reply under the
// limit, with more set and last_seq where the next goes on; the pages
// together are the run's events. Before, the reply was never sent and
// the caller timed out.
func TestRunGetPagesALargeRun(t *testing.T) {
	h := newHarness(t)
	h.runner(runner.Config{ToolsFile: writeTools(t, testTools), HealWait: -1})
	var b strings.Builder
	b.WriteString("name: big_outputs\nsteps:\n")
	for i := range 70 {
		fmt.Fprintf(&b, "  - name: s%d\n    compute: 'repeat(\"x\", 16000)'\n", i)
	}
	id := h.start(b.String(), nil, false)
	all := h.waitEnd(id, events.RunCompleted)
	seen, pages, after := 0, 0, uint64(0)
	for {
		body, _ := json.Marshal(command.GetRun{RunID: id, After: after})
		m := h.request(command.RunGet, body)
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			t.Fatalf("page %d: %s %.300s", pages+1, code, m.Data)
		}
		if len(m.Data) > 1<<20 {
			t.Fatalf("page %d is %d bytes", pages+1, len(m.Data))
		}
		var r command.RunEvents
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		pages++
		seen += len(r.Events)
		if len(r.Events) > 0 && r.Events[len(r.Events)-1].Seq != r.LastSeq && r.More {
			t.Fatalf("page %d: last_seq %d is not its last event's %d", pages, r.LastSeq, r.Events[len(r.Events)-1].Seq)
		}
		after = r.LastSeq
		if !r.More {
			break
		}
	}
	if pages < 2 || seen != len(all) {
		t.Fatalf("%d pages with %d events; the run has %d", pages, seen, len(all))
	}
}
