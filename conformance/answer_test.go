package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// confirmSkill is a skill whose first step is a confirmation with a
// timeout of timeoutS seconds (default cancel), then a computed value.
func confirmSkill(timeoutS int) string {
	return fmt.Sprintf(`name: conformance_confirm
description: one confirmation, then a computed value
inputs:
  what: {type: string, default: the thing}
steps:
  - name: approve
    confirm:
      title: Go ahead?
      message: "Go ahead with {{ inputs.what }}?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: %d
    output: decision
  - name: after
    compute: '"chose " + decision'
    output: result
summary: "{{ result }}"
`, timeoutS)
}

var options = []string{"proceed", "cancel"}

// pauseAtConfirm starts a run of skill and waits until it pauses at its
// confirmation; it returns the run's id, the confirmation's id and a
// watcher of the run.
func pauseAtConfirm(t *testing.T, h *heed, skill string) (runID, confirmID string, run *watcher) {
	t.Helper()
	runID = startRun(t, h.nc, skill, nil, "")
	run = watch(t, h.js, "heed.run."+runID+".>")
	p := run.waitSubject(30*time.Second, "heed.run."+runID+".paused")
	var paused pausedData
	p.decode(t, &paused)
	if paused.Reason != "awaiting_confirmation" || paused.ConfirmID == "" {
		t.Fatalf("paused = %s; want reason awaiting_confirmation with a confirm_id", p.Data)
	}
	return runID, paused.ConfirmID, run
}

// cmdResult is what one heed.cmd.confirm.answer caller got.
type cmdResult struct {
	by, choice string
	reply      answerReply
	err        error
}

type answerReply struct {
	ID      string `json:"id"`
	EventID string `json:"event_id"`
	Seq     uint64 `json:"seq"`
	Choice  string `json:"choice"`
	Method  string `json:"method"`
	By      string `json:"by"`
	Channel string `json:"channel"`
	RunID   string `json:"run_id"`
	At      string `json:"at"`
}

// race answers confirmation id at once with nCmd heed.cmd.confirm.answer
// requests and nDirect answered events published straight to the log
// (distinct ids and "by", valid choices, no run_id).
func race(t *testing.T, h *heed, id string, nCmd, nDirect int) (cmds []cmdResult, directErrs []error) {
	t.Helper()
	cmds = make([]cmdResult, nCmd)
	directErrs = make([]error, nDirect)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range nCmd {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			r := &cmds[i]
			r.by, r.choice = fmt.Sprintf("user:cmd-%02d", i), options[i%2]
			ready.Done()
			<-start
			r.err = request(h.nc, "heed.cmd.confirm.answer", map[string]any{
				"id": id, "choice": r.choice, "by": r.by, "channel": "conformance", "reason": "race",
			}, &r.reply)
		}()
	}
	for i := range nDirect {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			choice := options[i%2]
			if i%4 == 3 {
				choice = "launch_missiles" // not an option: refused wherever it lands
			}
			data := answeredData{Choice: choice, Method: "user", By: fmt.Sprintf("user:direct-%02d", i), Channel: "direct", Reason: "race"}
			ready.Done()
			<-start
			_, directErrs[i] = publishEvent(h.js, "heed.confirm.answered", id, fmt.Sprintf("%s/direct/%02d", id, i), data)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return cmds, directErrs
}

// winnerOf applies the contract's rule to the log: the first valid answer
// in log order takes effect (EVENTS.md, "Answers"). It returns the winner
// and every answer.
func winnerOf(t *testing.T, h *heed, id, runID string) (winner event, wd answeredData, answers []event) {
	t.Helper()
	all := streamMsgs(t, h.js, "heed.confirm."+id+".>")
	var requested uint64
	found := false
	for _, e := range all {
		switch e.Subject {
		case "heed.confirm." + id + ".requested":
			if requested == 0 {
				requested = e.Seq
			}
		case "heed.confirm." + id + ".expired":
			if !found {
				t.Errorf("the confirmation expired (%s) before any answer took effect", e)
			}
		case "heed.confirm." + id + ".answered":
			answers = append(answers, e)
			var d answeredData
			e.decode(t, &d)
			valid := requested != 0 && requested < e.Seq && slices.Contains(options, d.Choice) && (d.RunID == "" || d.RunID == runID)
			if valid && !found {
				winner, wd, found = e, d, true
			}
		}
	}
	if !found {
		t.Fatalf("no valid answer of %s in the log:\n%v", id, all)
	}
	return winner, wd, answers
}

// checkRace checks everything the contract promises about a race of
// answers to confirmation id (of run runID, or none) and returns the
// answer that took effect.
func checkRace(t *testing.T, h *heed, id, runID string, cmds []cmdResult, directErrs []error) (event, answeredData) {
	t.Helper()
	for i, err := range directErrs {
		if err != nil {
			t.Fatalf("direct answer %d was not stored: %v", i, err)
		}
	}
	winner, wd, answers := winnerOf(t, h, id, runID)
	t.Logf("winner: %s (of %d answers in the log)", winner, len(answers))

	// Every direct answer is in the log; a command writes only the answer
	// that takes effect, so at most one answer comes from a command.
	fromCmd := 0
	for _, a := range answers {
		var d answeredData
		a.decode(t, &d)
		if strings.HasPrefix(d.By, "user:cmd-") {
			fromCmd++
		}
	}
	if want := len(directErrs); len(answers)-fromCmd != want {
		t.Errorf("%d direct answers in the log, want %d", len(answers)-fromCmd, want)
	}
	if fromCmd > 1 {
		t.Errorf("%d answers written by heed.cmd.confirm.answer; a command writes only the first valid answer, so at most 1", fromCmd)
	}

	// At most one caller succeeds, and only the winner; every other caller
	// gets conflict naming the winner.
	succeeded := 0
	for _, r := range cmds {
		var ce *cmdError
		switch {
		case r.err == nil:
			succeeded++
			rep := r.reply
			if rep.EventID != winner.ID || rep.Seq != winner.Seq || rep.By != r.by || rep.Choice != r.choice || rep.Method != "user" || wd.By != r.by {
				t.Errorf("%s succeeded with %+v, but the answer that took effect is %s", r.by, rep, winner)
			}
		case errors.As(r.err, &ce):
			if ce.HeaderCode != "conflict" || ce.Code != "conflict" {
				t.Errorf("%s: %v; want code conflict (header and body)", r.by, ce)
				continue
			}
			if a := ce.Answer; a == nil || a.EventID != winner.ID || a.By != wd.By || a.Choice != wd.Choice || a.Method != wd.Method {
				t.Errorf("%s got conflict naming %s; want the winner (event_id %s, by %s, choice %s)", r.by, ce.Raw, winner.ID, wd.By, wd.Choice)
			}
		default:
			t.Errorf("%s: %v", r.by, r.err)
		}
	}
	if succeeded > 1 {
		t.Errorf("%d command callers succeeded, want at most 1", succeeded)
	}
	if succeeded != fromCmd {
		t.Errorf("%d command callers succeeded but %d answers in the log come from commands", succeeded, fromCmd)
	}

	// The index agrees.
	waitIndex(t, h.js, "confirm."+id, 10*time.Second, func(e indexEntry) error {
		if e.Status != "answered" || e.Choice != wd.Choice || e.By != wd.By || e.AnswerID != winner.ID || e.Method != wd.Method {
			return fmt.Errorf("want status answered, choice %s, by %s, method %s, answer_id %s", wd.Choice, wd.By, wd.Method, winner.ID)
		}
		if e.Refused != len(answers)-1 {
			return fmt.Errorf("refused %d, want %d", e.Refused, len(answers)-1)
		}
		if runID != "" && e.RunID != runID {
			return fmt.Errorf("run_id %q, want %s", e.RunID, runID)
		}
		return nil
	})

	// Every other answer is refused, in the log, naming the winner.
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		refused := map[string]refusedData{}
		for _, e := range streamMsgs(t, h.js, "heed.confirm."+id+".refused") {
			var d refusedData
			e.decode(t, &d)
			if _, dup := refused[d.AnswerID]; dup {
				return fmt.Errorf("two refused events for answer %s", d.AnswerID)
			}
			refused[d.AnswerID] = d
		}
		if _, ok := refused[winner.ID]; ok {
			return fmt.Errorf("the answer that took effect (%s) was refused", winner.ID)
		}
		for _, a := range answers {
			if a.ID == winner.ID {
				continue
			}
			var ad answeredData
			a.decode(t, &ad)
			d, ok := refused[a.ID]
			if !ok {
				return fmt.Errorf("no heed.confirm.%s.refused event for answer %s (%d of %d refused so far)", id, a.ID, len(refused), len(answers)-1)
			}
			if a.Seq < winner.Seq {
				// Before the winner: refused for itself (a choice that is
				// not an option), with no winner yet to name.
				if d.Code != "invalid_choice" || d.AnswerSeq != a.Seq || d.Winner != nil || slices.Contains(options, ad.Choice) {
					return fmt.Errorf("refused event for %s (seq %d, before the winner, choice %s) = %+v; want code invalid_choice and no winner", a.ID, a.Seq, ad.Choice, d)
				}
				continue
			}
			if d.Code != "already_answered" || d.AnswerSeq != a.Seq || d.By != ad.By || d.Choice != ad.Choice || d.Winner == nil ||
				d.Winner.EventID != winner.ID || d.Winner.By != wd.By || d.Winner.Choice != wd.Choice {
				return fmt.Errorf("refused event for %s (seq %d, by %s) = %+v winner %+v; want code already_answered naming the winner %s", a.ID, a.Seq, ad.By, d, d.Winner, winner.ID)
			}
		}
		return nil
	})
	return winner, wd
}

// checkNoDeadlineAction waits until the confirmation's deadline has passed
// for the server and for heed, and checks that the deadline did nothing:
// the answer that took effect cancelled it.
func checkNoDeadlineAction(t *testing.T, h *heed, id string, deadline time.Time) {
	t.Helper()
	// What must not happen is the deadline firing, which no event
	// announces if it was correctly cancelled. So a witness: a question of
	// its own, asked now with a deadline no earlier than this one's. The
	// server fires due schedules in the order it stored them, so once
	// heed has answered the witness at its deadline, this deadline has
	// fired too, if it still could.
	witness := id + "-witness"
	var rep struct {
		Deadline time.Time `json:"deadline"`
	}
	mustRequest(t, h.nc, "heed.cmd.confirm.request", map[string]any{
		"id": witness, "title": "Witness", "message": "Has the deadline passed?",
		"options": []map[string]any{{"label": "Proceed", "value": "proceed"}, {"label": "Cancel", "value": "cancel"}},
		"default": "cancel", "timeout_s": max(time.Until(deadline).Seconds()+0.1, 1), "requester": agentName,
	}, &rep)
	if rep.Deadline.Before(deadline) {
		t.Fatalf("the witness's deadline %v is before the deadline %v it is to follow", rep.Deadline, deadline)
	}
	checkFor(t, time.Until(rep.Deadline)+30*time.Second, 50*time.Millisecond, func() error {
		for _, e := range streamMsgs(t, h.js, "heed.confirm."+witness+".answered") {
			var d answeredData
			e.decode(t, &d)
			if d.Method == "timeout" {
				return nil
			}
			t.Fatalf("the witness %s was answered, yet not by its deadline: %s", witness, e)
		}
		return fmt.Errorf("the witness %s is not answered yet (its deadline is %v)", witness, rep.Deadline)
	})
	if evs := streamMsgs(t, h.js, "heed.confirm."+id+".expired"); len(evs) > 0 {
		t.Errorf("the confirmation was answered before its deadline, yet it expired: %v", evs)
	}
	for _, e := range streamMsgs(t, h.js, "heed.confirm."+id+".answered") {
		var d answeredData
		e.decode(t, &d)
		if d.Method == "timeout" {
			t.Errorf("the confirmation was answered before its deadline, yet the deadline answered: %s", e)
		}
	}
	// EVENTS.md, Deadlines: the answer that takes effect purges the
	// schedule, so it never fires.
	if evs := streamMsgs(t, h.js, "heed.schedule.fired.confirm."+id); len(evs) > 0 {
		t.Errorf("the deadline's schedule fired although an answer took effect before it: %v", evs)
	}
}

// TestAnswerRace fires many answers at one confirmation at once, through
// the command and straight into the log: exactly one takes effect, the
// first valid one in log order, and every reader agrees.
func TestAnswerRace(t *testing.T) {
	h := startHeed(t)

	// ask asks a question with a 10 s deadline (the races must land
	// before it on a loaded machine) and returns the deadline.
	ask := func(t *testing.T, id string) time.Time {
		t.Helper()
		var rep struct {
			ID            string    `json:"id"`
			Deadline      time.Time `json:"deadline"`
			AnswerSubject string    `json:"answer_subject"`
		}
		asked := time.Now()
		mustRequest(t, h.nc, "heed.cmd.confirm.request", map[string]any{
			"id": id, "title": "Race", "message": "Who answers first?",
			"options": []map[string]any{{"label": "Proceed", "value": "proceed"}, {"label": "Cancel", "value": "cancel"}},
			"default": "cancel", "timeout_s": 10, "requester": agentName,
		}, &rep)
		if rep.ID != id || rep.AnswerSubject != "heed.confirm."+id+".answered" {
			t.Errorf("confirm.request replied %+v; want id %s, answer_subject heed.confirm.%s.answered", rep, id, id)
		}
		if d := rep.Deadline.Sub(asked); d < 9*time.Second || d > 12*time.Second {
			t.Errorf("deadline %v is %v after the request; want about 10s", rep.Deadline, d)
		}
		return rep.Deadline
	}

	t.Run("question", func(t *testing.T) {
		t.Parallel()
		id := "race-" + fmt.Sprint(time.Now().UnixNano())
		deadline := ask(t, id)
		cmds, direct := race(t, h, id, 50, 20)
		checkRace(t, h, id, "", cmds, direct)
		checkNoDeadlineAction(t, h, id, deadline)
	})

	// Direct publishes are one round trip and usually win the race above;
	// with commands alone, one of them must win and be told so.
	t.Run("question, commands only", func(t *testing.T) {
		t.Parallel()
		id := "race-cmd-" + fmt.Sprint(time.Now().UnixNano())
		deadline := ask(t, id)
		cmds, direct := race(t, h, id, 50, 0)
		_, wd := checkRace(t, h, id, "", cmds, direct)
		ok := 0
		for _, r := range cmds {
			if r.err == nil {
				ok++
			}
		}
		if ok != 1 || !strings.HasPrefix(wd.By, "user:cmd-") {
			t.Errorf("%d of 50 command callers succeeded and the answer that took effect is by %s; want exactly 1, the winner", ok, wd.By)
		}
		checkNoDeadlineAction(t, h, id, deadline)
	})

	t.Run("run confirmation", func(t *testing.T) {
		t.Parallel()
		runID, cid, run := pauseAtConfirm(t, h, confirmSkill(3))
		deadline := time.Now().Add(3 * time.Second) // at the latest: the request is older than the pause we saw
		cmds, direct := race(t, h, cid, 50, 20)
		winner, wd := checkRace(t, h, cid, runID, cmds, direct)

		end := run.waitFor(30*time.Second, "the run's end", isRunEnd)
		// The run's own log holds the answer it acted on: one resumed event
		// with the winner's answer, before the run's end, whichever the
		// choice (EVENTS.md: also before run.cancelled when it was cancel).
		resumed := run.find(isSubject("heed.run." + runID + ".resumed"))
		if len(resumed) != 1 {
			t.Fatalf("%d resumed events, want 1; events:%s", len(resumed), run.dump())
		}
		var r resumedData
		resumed[0].decode(t, &r)
		if r.Choice != wd.Choice || r.By != wd.By || r.Method != wd.Method || r.ConfirmID != cid {
			t.Errorf("resumed = %s; want the winner's choice %s, by %s, method %s, confirm_id %s", resumed[0].Data, wd.Choice, wd.By, wd.Method, cid)
		}
		if resumed[0].Seq > end.Seq {
			t.Errorf("the resumed event (#%d) comes after the run's end (#%d); events:%s", resumed[0].Seq, end.Seq, run.dump())
		}
		switch wd.Choice {
		case "proceed":
			if end.Type != "heed.run.completed" {
				t.Fatalf("the winner chose proceed, but the run ended with %s; events:%s", end, run.dump())
			}
			var c completedData
			end.decode(t, &c)
			if c.Summary != "chose proceed" {
				t.Errorf("completed summary = %q, want %q", c.Summary, "chose proceed")
			}
		case "cancel":
			if end.Type != "heed.run.cancelled" {
				t.Fatalf("the winner chose cancel, but the run ended with %s; events:%s", end, run.dump())
			}
			var c struct {
				By string `json:"by"`
			}
			end.decode(t, &c)
			if c.By != wd.By {
				t.Errorf("cancelled by %q, want the winner %s", c.By, wd.By)
			}
		}
		if n := len(run.find(isRunEnd)); n != 1 {
			t.Errorf("%d run-ending events, want 1; events:%s", n, run.dump())
		}
		wantStatus := map[string]string{"proceed": "completed", "cancel": "cancelled"}[wd.Choice]
		waitIndex(t, h.js, "run."+runID, 10*time.Second, func(e indexEntry) error {
			if e.Status != wantStatus {
				return fmt.Errorf("status %q, want %s", e.Status, wantStatus)
			}
			return nil
		})
		checkAudit(t, h, runID, cid, winner)
		checkNoDeadlineAction(t, h, cid, deadline)
	})
}

// checkAudit reads `heed audit RUN` and checks that it tells the same
// story as the log: the run's events with its confirmation's merged in, the
// first valid answer the one that took effect and every other answer
// marked refused.
func checkAudit(t *testing.T, h *heed, runID, cid string, winner event) {
	t.Helper()
	cmd := exec.Command(heedBin, "audit", runID, "--nats-url", h.url)
	cmd.Dir = repoRoot
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("heed audit %s: %v\n%s", runID, err, stderr.String())
	}
	var wd answeredData
	winner.decode(t, &wd)
	answers, refusedMarks, refusals, ending := 0, 0, 0, false
	var taken []string
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.Contains(line, "confirm.answered"):
			answers++
			if strings.Contains(line, "✗ refused") {
				refusedMarks++
			} else {
				taken = append(taken, line)
			}
		case strings.Contains(line, "confirm.refused"):
			refusals++
		case strings.Contains(line, "run.completed"), strings.Contains(line, "run.cancelled"):
			ending = true
		}
	}
	if len(taken) != 1 || !strings.Contains(taken[0], "by "+wd.By+" ") || !strings.Contains(taken[0], fmt.Sprint(winner.Seq)) {
		t.Errorf("heed audit marks %d answers as taking effect, want one, the winner (seq %d, by %s):\n%s", len(taken), winner.Seq, wd.By, strings.Join(taken, "\n"))
	}
	if refusedMarks != answers-1 || refusals != answers-1 {
		t.Errorf("heed audit: %d answers, %d marked refused, %d refusal events; want every answer but the winner refused\n%s", answers, refusedMarks, refusals, out)
	}
	if !ending {
		t.Errorf("heed audit shows no end of the run:\n%s", out)
	}
}

// TestDirectAnswerWithoutRunID answers a run's confirmation by publishing
// heed.confirm.<id>.answered straight to the log, without run_id (it is
// optional): the run resumes with that answer and completes.
func TestDirectAnswerWithoutRunID(t *testing.T) {
	h := startHeed(t)
	runID, cid, run := pauseAtConfirm(t, h, confirmSkill(300))
	eventID := cid + "/answer/direct-1"
	if _, err := publishEvent(h.js, "heed.confirm.answered", cid, eventID,
		answeredData{Choice: "proceed", Method: "user", By: "user:direct", Channel: "conformance", Reason: "published by hand"}); err != nil {
		t.Fatal(err)
	}
	end := run.waitFor(30*time.Second, "the run's end", isRunEnd)
	if end.Type != "heed.run.completed" {
		t.Fatalf("run ended with %s, want completed; events:%s", end, run.dump())
	}
	r := run.waitSubject(time.Second, "heed.run."+runID+".resumed")
	var res resumedData
	r.decode(t, &res)
	if res.Choice != "proceed" || res.By != "user:direct" || res.Method != "user" || res.ConfirmID != cid {
		t.Errorf("resumed = %s; want choice proceed, by user:direct, method user, confirm_id %s", r.Data, cid)
	}
	waitIndex(t, h.js, "confirm."+cid, 10*time.Second, func(e indexEntry) error {
		if e.Status != "answered" || e.AnswerID != eventID || e.Choice != "proceed" || e.By != "user:direct" {
			return fmt.Errorf("want status answered by user:direct with proceed, answer_id %s", eventID)
		}
		return nil
	})
	waitIndex(t, h.js, "run."+runID, 10*time.Second, func(e indexEntry) error {
		if e.Status != "completed" {
			return fmt.Errorf("status %q, want completed", e.Status)
		}
		return nil
	})
}

// TestInvalidChoiceRefused publishes an answer whose choice is not an
// option: it is refused (invalid_choice) and the run stays paused; a valid
// answer through heed.cmd.confirm.answer then completes the run.
func TestInvalidChoiceRefused(t *testing.T) {
	h := startHeed(t)
	runID, cid, run := pauseAtConfirm(t, h, confirmSkill(300))
	conf := watch(t, h.js, "heed.confirm."+cid+".>")

	badID := cid + "/answer/missiles"
	ack, err := publishEvent(h.js, "heed.confirm.answered", cid, badID,
		answeredData{Choice: "launch_missiles", Method: "user", By: "user:mallory", Channel: "conformance", RunID: runID})
	if err != nil {
		t.Fatal(err)
	}
	e := conf.waitFor(10*time.Second, "heed.confirm."+cid+".refused for "+badID, func(e event) bool {
		return e.Subject == "heed.confirm."+cid+".refused" && strings.Contains(string(e.Data), badID)
	})
	var ref refusedData
	e.decode(t, &ref)
	if ref.Code != "invalid_choice" || ref.AnswerID != badID || ref.AnswerSeq != ack.Sequence || ref.Choice != "launch_missiles" || ref.By != "user:mallory" || ref.Winner != nil {
		t.Errorf("refused = %s; want code invalid_choice for %s (seq %d, by user:mallory), no winner", e.Data, badID, ack.Sequence)
	}
	// The index has judged the answer (refused 1) and the confirmation is
	// still open; the run is still paused.
	waitIndex(t, h.js, "confirm."+cid, 10*time.Second, func(e indexEntry) error {
		if e.Refused != 1 {
			return fmt.Errorf("refused %d, want 1", e.Refused)
		}
		if e.Status != "pending" || e.AnswerID != "" || e.Choice != "" {
			return fmt.Errorf("want status pending with no answer after an invalid choice")
		}
		return nil
	})
	if x, err := readIndex(ctxFor(t, 5*time.Second), h.js, "run."+runID); err != nil || x.Status != "paused" {
		t.Errorf("after the invalid answer the run's index entry is %+v (%v); want status paused", x, err)
	}

	var rep answerReply
	mustRequest(t, h.nc, "heed.cmd.confirm.answer", map[string]any{"id": cid, "choice": "proceed", "by": "user:alice", "channel": "conformance", "reason": "a real option"}, &rep)
	if rep.ID != cid || rep.Choice != "proceed" || rep.Method != "user" || rep.By != "user:alice" || rep.RunID != runID || rep.EventID == "" || rep.Seq <= ack.Sequence {
		t.Errorf("confirm.answer replied %+v; want id %s, choice proceed, method user, by user:alice, run_id %s, seq after %d", rep, cid, runID, ack.Sequence)
	}
	end := run.waitFor(30*time.Second, "the run's end", isRunEnd)
	if end.Type != "heed.run.completed" {
		t.Fatalf("run ended with %s, want completed; events:%s", end, run.dump())
	}
	resumed := run.find(isSubject("heed.run." + runID + ".resumed"))
	if len(resumed) != 1 {
		t.Fatalf("%d resumed events, want 1; events:%s", len(resumed), run.dump())
	}
	var res resumedData
	resumed[0].decode(t, &res)
	if res.Choice != "proceed" || res.By != "user:alice" {
		t.Errorf("resumed = %s; want choice proceed by user:alice (the invalid answer must change nothing)", resumed[0].Data)
	}
	for _, c := range run.find(isSubject("heed.run." + runID + ".step.completed")) {
		var d stepCompletedData
		c.decode(t, &d)
		if d.Step == "approve" && string(d.Output) != `"proceed"` {
			t.Errorf("the confirm step completed with %s, want \"proceed\"", d.Output)
		}
	}
	waitIndex(t, h.js, "confirm."+cid, 10*time.Second, func(e indexEntry) error {
		if e.Status != "answered" || e.AnswerID != rep.EventID || e.Choice != "proceed" || e.Refused != 1 {
			return fmt.Errorf("want status answered with proceed, answer_id %s, refused 1", rep.EventID)
		}
		return nil
	})
}

// TestAnswerRequestIDFromOutside: heed.cmd.confirm.answer's request_id from
// a plain NATS client with JSON. Sent twice (a retry after a timeout), the
// second reply is the first's and the log holds one answer; the same id
// with another choice is a conflict; a request_id that is not a string of
// 1 to 128 characters is refused as invalid_request naming the field, and
// nothing is written for it. A request that asks for its reply in an API's
// namespace ($JS.…) gets no reply there and acts on nothing.
func TestAnswerRequestIDFromOutside(t *testing.T) {
	h := startHeed(t)
	runID, cid, run := pauseAtConfirm(t, h, confirmSkill(300))

	for _, bad := range []any{"", strings.Repeat("x", 129), 7, map[string]any{"id": "x"}} {
		err := request(h.nc, "heed.cmd.confirm.answer", map[string]any{"id": cid, "choice": "proceed", "by": "user:alice", "request_id": bad}, nil)
		var ce *cmdError
		if !errors.As(err, &ce) || ce.Code != "invalid_request" || !strings.Contains(ce.Message, "request_id") {
			t.Errorf("request_id %v: %v; want invalid_request naming request_id", bad, err)
		}
	}
	// Asked to reply onto the JetStream API (as the service's rights): the
	// command is not served at all; the confirmation stays unanswered.
	spy, err := h.nc.SubscribeSync("$JS.API.STREAM.INFO.HEED_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"id": cid, "choice": "proceed", "by": "user:alice"})
	if err := h.nc.PublishRequest("heed.cmd.confirm.answer", "$JS.API.STREAM.INFO.HEED_EVENTS", body); err != nil {
		t.Fatal(err)
	}
	if m, err := spy.NextMsg(2 * time.Second); err == nil && m.Header.Get("Nats-Service-Error-Code") == "" && strings.Contains(string(m.Data), `"choice"`) {
		t.Errorf("the service replied onto $JS.API.STREAM.INFO.HEED_EVENTS: %s", m.Data)
	}
	if n := len(run.find(isSubject("heed.run." + runID + ".resumed"))); n != 0 {
		t.Fatalf("a request replying into $JS.API took effect: the run resumed")
	}

	var first, again answerReply
	mustRequest(t, h.nc, "heed.cmd.confirm.answer", map[string]any{"id": cid, "choice": "proceed", "by": "user:alice", "request_id": "click-42"}, &first)
	mustRequest(t, h.nc, "heed.cmd.confirm.answer", map[string]any{"id": cid, "choice": "proceed", "by": "user:alice", "request_id": "click-42"}, &again)
	if first.EventID == "" || again.EventID != first.EventID || again.Seq != first.Seq || again.By != "user:alice" {
		t.Fatalf("the same request twice: %+v then %+v; want the same answer", first, again)
	}
	err = request(h.nc, "heed.cmd.confirm.answer", map[string]any{"id": cid, "choice": "cancel", "by": "user:alice", "request_id": "click-42"}, nil)
	var ce *cmdError
	if !errors.As(err, &ce) || ce.Code != "conflict" || !strings.Contains(ce.Message, `request id "click-42"`) {
		t.Errorf("the same request id with another choice: %v; want a conflict naming it", err)
	}
	stream, err := h.js.Stream(ctxFor(t, 10*time.Second), eventStream)
	if err != nil {
		t.Fatal(err)
	}
	answers := 0
	for seq := uint64(1); ; {
		m, err := stream.GetMsg(ctxFor(t, 10*time.Second), seq, jetstream.WithGetMsgSubject("heed.confirm."+cid+".answered"))
		if err != nil {
			break
		}
		answers++
		seq = m.Sequence + 1
	}
	if answers != 1 {
		t.Errorf("%d answers in the log, want 1", answers)
	}
}
