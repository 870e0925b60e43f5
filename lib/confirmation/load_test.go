package confirmation_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
)

// TestLoadVerdictsAgreesWithLoad: reading only the requests, expiries,
// answers and refusals from their literal subjects judges every answer
// (and knows every refusal reported) as reading the whole confirmation
// does, among other confirmations' events, a delegation, an expiry,
// garbage and an answer before the question.
func TestLoadVerdictsAgreesWithLoad(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pub := func(typ events.Type, id, eid string, data any) {
		t.Helper()
		ev, err := events.NewEvent(typ, id, eid, "test", data)
		if err != nil {
			t.Fatal(err)
		}
		ev.SetTime(at)
		if _, err := bus.Publish(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	req := events.ConfirmRequestedData{Message: "go?", Options: []events.Option{{Label: "Yes", Value: "yes"}, {Label: "No", Value: "no"}}, Default: "no", Requester: "test", RunID: "r1"}
	answer := func(id, eid, choice, method string) {
		pub(events.ConfirmAnswered, id, eid, events.ConfirmAnsweredData{Choice: choice, Method: method, By: "someone"})
	}
	answer("c1", "early", "yes", events.MethodUser) // before the question: refused
	for i := range 50 {
		pub(events.ConfirmRequested, fmt.Sprintf("other%d", i), fmt.Sprintf("other%d/requested", i), req)
	}
	pub(events.ConfirmRequested, "c1", "c1/requested", req)
	pub(events.ConfirmDelegated, "c1", "c1/delegated", events.ConfirmDelegatedData{Agent: "a", Message: "go?", Options: req.Options})
	answer("c1", "bad-choice", "maybe", events.MethodUser)
	if _, err := bus.JetStream().PublishMsg(ctx, &nats.Msg{Subject: "heed.confirm.c1.answered", Data: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		answer(fmt.Sprintf("other%d", i), fmt.Sprintf("other%d/a", i), "yes", events.MethodUser)
	}
	pub(events.ConfirmRefused, "c1", "c1/refused/bad-choice", events.ConfirmRefusedData{AnswerID: "bad-choice", AnswerSeq: 1, Choice: "maybe", Method: events.MethodUser, By: "someone", Code: confirmation.RefusedChoice, Reason: "not an option"})
	pub(events.ConfirmExpired, "c1", "c1/expired", events.ConfirmExpiredData{Deadline: at, Default: "no"})
	answer("c1", "after-expiry", "yes", events.MethodUser)
	answer("c1", "timeout", "no", events.MethodTimeout)
	answer("c1", "late", "no", events.MethodTimeout)

	full, err := confirmation.Load(ctx, bus, "c1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := confirmation.LoadVerdicts(ctx, bus, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if full.AnswerID != "timeout" || got.AnswerID != full.AnswerID {
		t.Fatalf("winner: LoadVerdicts %q, Load %q; want timeout", got.AnswerID, full.AnswerID)
	}
	if len(got.Answers) != 5 || len(got.Answers) != len(full.Answers) {
		t.Fatalf("answers: LoadVerdicts %d, Load %d; want 5", len(got.Answers), len(full.Answers))
	}
	for i, a := range full.Answers {
		g := got.Answers[i]
		code := func(r *confirmation.Refusal) string {
			if r == nil {
				return "took effect"
			}
			return r.Code
		}
		if g.Seq != a.Seq || g.EventID != a.EventID || code(g.Refusal) != code(a.Refusal) {
			t.Errorf("answer %d: LoadVerdicts %d %s %s, Load %d %s %s", i, g.Seq, g.EventID, code(g.Refusal), a.Seq, a.EventID, code(a.Refusal))
		}
	}
	if !full.Reported["bad-choice"] || !maps.Equal(got.Reported, full.Reported) {
		t.Errorf("refusals reported: LoadVerdicts %v, Load %v; want bad-choice", got.Reported, full.Reported)
	}
	if _, err := confirmation.LoadVerdicts(ctx, bus, "nothing"); events.CodeOf(err) != events.CodeNotFound {
		t.Errorf("a confirmation never asked: %v, want not_found", err)
	}
}

// TestAnswerFromStateBehindTheLog: an answer judged from a state the
// caller held is written only if the log has nothing after it; a state
// that is behind (another answer came first) reads the log and gets the
// conflict naming the winner, and nothing more is written.
func TestAnswerFromStateBehindTheLog(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := context.Background()
	req := events.ConfirmRequestedData{Message: "go?", Options: []events.Option{{Label: "Yes", Value: "yes"}, {Label: "No", Value: "no"}}, Requester: "test", RunID: "r1"}
	for _, id := range []string{"c1", "c2"} {
		ev, err := events.NewEvent(events.ConfirmRequested, id, id+"/requested", "test", req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.Publish(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	held, err := confirmation.Load(ctx, bus, "c1")
	if err != nil {
		t.Fatal(err)
	}
	// Someone answers first, straight to the log.
	direct, err := events.NewEvent(events.ConfirmAnswered, "c1", "direct", "someone", events.ConfirmAnsweredData{Choice: "no", Method: events.MethodUser, By: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(ctx, &direct); err != nil {
		t.Fatal(err)
	}
	_, err = confirmation.Answer(ctx, bus, "test", "c1", events.ConfirmAnsweredData{Choice: "yes", Method: events.MethodUser, By: "second"}, confirmation.FromState{State: held.Clone()})
	var aa *confirmation.AlreadyAnswered
	if !errors.As(err, &aa) || aa.Winner.EventID != "direct" {
		t.Fatalf("answer from a state behind the log: %v, want conflict naming direct", err)
	}
	if st, err := confirmation.Load(ctx, bus, "c1"); err != nil || len(st.Answers) != 1 {
		t.Fatalf("c1 after the late answer: %v, %v; want the one direct answer", st, err)
	}
	// A state that is current is written from without a read.
	held2, err := confirmation.Load(ctx, bus, "c2")
	if err != nil {
		t.Fatal(err)
	}
	st, err := confirmation.Answer(ctx, bus, "test", "c2", events.ConfirmAnsweredData{Choice: "yes", Method: events.MethodUser, By: "me"}, confirmation.FromState{State: held2.Clone()})
	if err != nil || st.Answer == nil || st.Answer.By != "me" {
		t.Fatalf("answer from a current state: %+v, %v", st, err)
	}
	if len(held2.Answers) != 0 {
		t.Errorf("the caller's state changed: %d answers", len(held2.Answers))
	}
}
