package confirm_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// quorumSkill pauses at a confirmation three named approvers answer, two
// of whom must agree.
const quorumSkill = `name: scale_quorum
steps:
  - name: approve_scale
    confirm:
      message: Scale prod-db down to 0?
      options:
        - {label: Approve, value: approve}
        - {label: Deny, value: deny}
      approvers: [alice, bob, carol]
      quorum: {required: 2}
  - name: after
    compute: 1
`

func startSkill(t *testing.T, nc *nats.Conn, src string) string {
	t.Helper()
	var req command.StartRun
	req.Skill.Source, req.Skill.File = src, "scale_quorum.yaml"
	req.RequestedBy = "user:tester"
	b, _ := json.Marshal(req)
	var m *nats.Msg
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		var err error
		m, err = nc.Request(command.RunStart, b, 10*time.Second)
		return err
	})
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("start: %s %s", code, m.Data)
	}
	var reply command.RunReply
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.RunID == "" {
		t.Fatalf("start reply %s: %v", m.Data, err)
	}
	return reply.RunID
}

// answerReply is one reply of heed.cmd.confirm.answer: the answer written,
// or the error.
type answerReply struct {
	ok  command.AnswerReply
	err *command.ErrorReply
}

func answerCmd(t *testing.T, nc *nats.Conn, id, choice, by string) answerReply {
	t.Helper()
	return answerWithRequest(t, nc, id, choice, by, "")
}

// TestQuorumTwoOfThree is issue 14's acceptance: 2 of 3 approvers needed,
// 3 answers race: exactly 2 are counted, the second of them is the answer
// that takes effect, the third is refused as already answered, and the run
// resumes once and completes. Before that, someone who is not an approver
// is refused (not_allowed, visible as a refused event) and the run waits.
func TestQuorumTwoOfThree(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{}), runnerSvc)
	bus, nc := env.Bus(t), env.Conn(t)

	run := startSkill(t, nc, quorumSkill)
	paused := decode[events.RunPausedData](t, waitRun(t, bus, run, events.RunPaused))
	cid := paused.ConfirmID
	if cid != runner.ConfirmID(run, 0, 1) {
		t.Fatalf("paused at %+v", paused)
	}
	waitAsked(t, bus, cid)
	req := decode[events.ConfirmRequestedData](t, ofType(logOf(t, bus, "confirm", cid), events.ConfirmRequested)[0])
	if strings.Join(req.Approvers, ",") != "alice,bob,carol" || req.Quorum == nil || req.Quorum.Required != 2 {
		t.Fatalf("request = approvers %v quorum %+v", req.Approvers, req.Quorum)
	}

	// mallory is not an approver: refused with the reason, nothing written.
	r := answerCmd(t, nc, cid, "approve", "mallory")
	if r.err == nil || r.err.Code != events.CodeInvalidRequest || !strings.Contains(r.err.Message, "mallory may not answer this confirmation: its approvers are alice, bob, carol") {
		t.Fatalf("mallory's answer: %+v %+v", r.ok, r.err)
	}
	// Published straight to the log, it is refused by every reader: the
	// router reports it, the run does not move.
	publish(t, bus, newEvent(t, events.ConfirmAnswered, cid, cid+"/answer/mallory", "mallory/script", events.ConfirmAnsweredData{Choice: "approve", Method: events.MethodUser, By: "mallory"}))
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, ev := range ofType(logOf(t, bus, "confirm", cid), events.ConfirmRefused) {
			if d := decode[events.ConfirmRefusedData](t, ev); d.By == "mallory" && d.Code == confirmation.RefusedNotAllowed {
				return nil
			}
		}
		return errors.New("no not_allowed refusal for mallory yet")
	})
	if _, ok := scheduled(t, bus, cid); !ok {
		t.Fatal("mallory's refused answer cancelled the deadline")
	}
	if evs := logOf(t, bus, "run", run); len(ofType(evs, events.RunResumed)) != 0 {
		t.Fatalf("the run resumed on mallory's answer: %v", types(evs))
	}

	// alice, bob and carol approve at once.
	replies := make([]answerReply, 3)
	var ready, wg sync.WaitGroup
	release := make(chan struct{})
	for i, by := range []string{"alice", "bob", "carol"} {
		ready.Add(1)
		wg.Go(func() {
			ready.Done()
			<-release
			replies[i] = answerCmd(t, nc, cid, "approve", by)
		})
	}
	ready.Wait()
	close(release)
	wg.Wait()
	var counted, took, late []string
	for i, r := range replies {
		by := []string{"alice", "bob", "carol"}[i]
		switch {
		case r.err != nil && r.err.Code == events.CodeConflict && strings.Contains(r.err.Message, "already answered"):
			late = append(late, by)
		case r.err != nil:
			t.Errorf("%s: unexpected error %s: %s", by, r.err.Code, r.err.Message)
		case r.ok.Counted:
			if r.ok.Needed != 1 || len(r.ok.Votes) != 1 || r.ok.Votes[0].By != by {
				t.Errorf("%s's counted vote: needed %d votes %+v", by, r.ok.Needed, r.ok.Votes)
			}
			counted = append(counted, by)
		default:
			if len(r.ok.Votes) != 2 || r.ok.Votes[1].By != by || r.ok.By != by {
				t.Errorf("%s's winning vote: %+v", by, r.ok)
			}
			took = append(took, by)
		}
	}
	if len(counted) != 1 || len(took) != 1 || len(late) != 1 {
		t.Fatalf("counted %v, took effect %v, already answered %v; want one each", counted, took, late)
	}

	// The log agrees: two counted answers, the second the winner.
	st, err := confirmation.Load(ctxFor(t, 10*time.Second), bus, cid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Answer == nil || st.Answer.By != took[0] || len(st.Gate.Winner.Votes) != 2 || st.Gate.Winner.Votes[0].By != counted[0] {
		t.Fatalf("log: answer %+v winner %+v", st.Answer, st.Gate.Winner)
	}

	waitRun(t, bus, run, events.RunCompleted)
	evs := logOf(t, bus, "run", run)
	if got := ofType(evs, events.RunResumed); len(got) != 1 {
		t.Fatalf("run resumed %d times: %v", len(got), types(evs))
	}
	if d := decode[events.RunResumedData](t, ofType(evs, events.RunResumed)[0]); d.Choice != "approve" || d.By != took[0] {
		t.Errorf("resumed %+v, want approve by %s", d, took[0])
	}
	if _, ok := scheduled(t, bus, cid); ok {
		t.Error("the deadline is still scheduled after the quorum was reached")
	}
}

// TestQuorumVoteOnceAndVeto: a voter votes once (a second vote through
// the command is refused already_voted, one published straight to the log
// is reported refused), a vote for a veto option decides at once, and a
// request naming approvers is not answered by a rule.
func TestQuorumVoteOnceAndVeto(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	rules, err := confirm.ParseRules("rules.yaml", []byte("rules:\n  - name: everything proceeds\n    when: 'true'\n    answer: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, env, router(confirm.Config{Rules: rules}))
	bus, nc := env.Bus(t), env.Conn(t)
	const id = "q-veto"
	b, _ := json.Marshal(command.RequestConfirmation{ID: id, ConfirmRequestedData: events.ConfirmRequestedData{
		Message: "Drop the table?", Options: []events.Option{{Label: "Approve", Value: "approve"}, {Label: "Deny", Value: "deny"}},
		Approvers: []string{"alice", "bob", "carol"}, Quorum: &events.Quorum{Required: 3, Veto: []string{"deny"}},
	}})
	m, err := nc.Request(command.ConfirmRequest, b, 10*time.Second)
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("request: %v %s", err, m.Data)
	}
	waitAsked(t, bus, id) // the rule did not answer for the approvers

	if r := answerCmd(t, nc, id, "approve", "alice"); r.err != nil || !r.ok.Counted || r.ok.Needed != 2 {
		t.Fatalf("alice: %+v %+v", r.ok, r.err)
	}
	if r := answerCmd(t, nc, id, "deny", "alice"); r.err == nil || r.err.Code != events.CodeConflict || !strings.Contains(r.err.Message, "alice has voted already") {
		t.Fatalf("alice again: %+v %+v", r.ok, r.err)
	}
	publish(t, bus, newEvent(t, events.ConfirmAnswered, id, id+"/answer/alice-again", "alice/script", events.ConfirmAnsweredData{Choice: "deny", Method: events.MethodUser, By: "alice"}))
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, ev := range ofType(logOf(t, bus, "confirm", id), events.ConfirmRefused) {
			if d := decode[events.ConfirmRefusedData](t, ev); d.By == "alice" && d.Code == confirmation.RefusedVoted {
				return nil
			}
		}
		return errors.New("no already_voted refusal for alice's second vote yet")
	})
	if _, ok := scheduled(t, bus, id); !ok {
		t.Fatal("a vote cancelled the deadline")
	}
	r := answerCmd(t, nc, id, "deny", "bob")
	if r.err != nil || r.ok.Counted || r.ok.Choice != "deny" || r.ok.By != "bob" {
		t.Fatalf("bob's veto: %+v %+v", r.ok, r.err)
	}
	st, err := confirmation.Load(ctxFor(t, 10*time.Second), bus, id)
	if err != nil || st.Answer == nil || st.Answer.Choice != "deny" {
		t.Fatalf("after the veto: %+v %v", st, err)
	}
	if r := answerCmd(t, nc, id, "approve", "carol"); r.err == nil || r.err.Code != events.CodeConflict || !strings.Contains(r.err.Message, "already answered") {
		t.Fatalf("carol after the veto: %+v %+v", r.ok, r.err)
	}
}

// answerWithRequest sends heed.cmd.confirm.answer, with a request id if
// one is given.
func answerWithRequest(t *testing.T, nc *nats.Conn, id, choice, by, requestID string) answerReply {
	t.Helper()
	b, _ := json.Marshal(command.AnswerConfirmation{ID: id, Choice: choice, By: by, Channel: "test", RequestID: requestID})
	m, err := nc.Request(command.ConfirmAnswer, b, 15*time.Second)
	if err != nil {
		t.Errorf("answer by %s: %v", by, err)
		return answerReply{}
	}
	var r answerReply
	if m.Header.Get(micro.ErrorCodeHeader) != "" {
		r.err = &command.ErrorReply{}
		if err := json.Unmarshal(m.Data, r.err); err != nil {
			t.Errorf("error reply %s: %v", m.Data, err)
		}
		return r
	}
	if err := json.Unmarshal(m.Data, &r.ok); err != nil {
		t.Errorf("reply %s: %v", m.Data, err)
	}
	return r
}

// TestAnswerRequestIDMakesARetryTakeEffectOnce: an answer sent again with
// the same request id (a caller whose first try timed out) gets the reply
// of the first, not a conflict, and the log holds one answer; a vote sent
// again is counted once; the same request id with another choice is a
// conflict; someone else's answer is still refused as late.
func TestAnswerRequestIDMakesARetryTakeEffectOnce(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{}), runnerSvc)
	bus, nc := env.Bus(t), env.Conn(t)

	run := startSkill(t, nc, quorumSkill)
	cid := decode[events.RunPausedData](t, waitRun(t, bus, run, events.RunPaused)).ConfirmID
	waitAsked(t, bus, cid)

	// alice's vote, twice: counted once.
	first := answerWithRequest(t, nc, cid, "approve", "alice", "click-1")
	again := answerWithRequest(t, nc, cid, "approve", "alice", "click-1")
	if first.err != nil || again.err != nil || !first.ok.Counted || !again.ok.Counted || again.ok.EventID != first.ok.EventID || again.ok.Seq != first.ok.Seq {
		t.Fatalf("alice's vote %+v %+v, then again %+v %+v; want the same counted vote twice", first.ok, first.err, again.ok, again.err)
	}
	// The same request id with another choice: a conflict that says so.
	if r := answerWithRequest(t, nc, cid, "deny", "alice", "click-1"); r.err == nil || r.err.Code != events.CodeConflict || !strings.Contains(r.err.Message, `request id "click-1" answered`) {
		t.Fatalf("click-1 with another choice: %+v %+v", r.ok, r.err)
	}
	// bob's vote decides; sent again, the same decision.
	took := answerWithRequest(t, nc, cid, "approve", "bob", "b-7")
	retried := answerWithRequest(t, nc, cid, "approve", "bob", "b-7")
	if took.err != nil || took.ok.Counted || retried.err != nil || retried.ok.EventID != took.ok.EventID || retried.ok.By != "bob" || len(retried.ok.Votes) != 2 {
		t.Fatalf("bob's vote %+v %+v, then again %+v %+v; want the deciding answer twice", took.ok, took.err, retried.ok, retried.err)
	}
	// carol is late, request id or not.
	if r := answerWithRequest(t, nc, cid, "approve", "carol", "b-7"); r.err == nil || r.err.Code != events.CodeConflict || !strings.Contains(r.err.Message, "already answered") {
		t.Fatalf("carol's late answer: %+v %+v", r.ok, r.err)
	}
	waitRun(t, bus, run, events.RunCompleted)
	if got := ofType(logOf(t, bus, "confirm", cid), events.ConfirmAnswered); len(got) != 2 {
		t.Fatalf("%d answers in the log, want alice's vote and bob's", len(got))
	}
	if got := ofType(logOf(t, bus, "run", run), events.RunResumed); len(got) != 1 {
		t.Fatalf("resumed %d times", len(got))
	}
}
