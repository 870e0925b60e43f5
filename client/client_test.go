package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// The client's reads and waits run against a real nats-server with heed's
// streams, fed events the way heed's services (or anyone) would write them.

func setup(t *testing.T) (*client.Client, *events.Bus, context.Context) {
	t.Helper()
	env := eventstest.Start(t)
	c, err := client.Connect(context.Background(), env.URL(), client.Name("client-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c, env.Bus(t), ctx
}

func publish(t *testing.T, ctx context.Context, bus *events.Bus, typ events.Type, id, eventID string, data any) {
	t.Helper()
	ev, err := events.NewEvent(typ, id, eventID, "test", data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Publish(ctx, &ev); err != nil {
		t.Fatal(err)
	}
}

func ask(t *testing.T, ctx context.Context, bus *events.Bus, id string) {
	t.Helper()
	publish(t, ctx, bus, events.ConfirmRequested, id, id+"/requested", events.ConfirmRequestedData{
		Message: "Release?", Requester: "agent/test", Default: "cancel",
		Options: []events.Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}},
	})
}

func answer(t *testing.T, ctx context.Context, bus *events.Bus, id, eventID, choice, by string) {
	t.Helper()
	publish(t, ctx, bus, events.ConfirmAnswered, id, eventID, events.ConfirmAnsweredData{Choice: choice, Method: events.MethodUser, By: by})
}

func TestWaitAnswerTakesTheFirstValidAnswer(t *testing.T) {
	c, bus, ctx := setup(t)
	ask(t, ctx, bus, "c1")
	got := make(chan *confirmation.State, 1)
	go func() {
		st, err := c.WaitAnswer(ctx, "c1")
		if err != nil {
			t.Error(err)
		}
		got <- st
	}()
	answer(t, ctx, bus, "c1", "a1", "launch_missiles", "eve") // not an option: refused
	answer(t, ctx, bus, "c1", "a2", "proceed", "alice")
	answer(t, ctx, bus, "c1", "a3", "cancel", "bob") // too late
	select {
	case st := <-got:
		if st == nil || st.Answer == nil || st.Answer.By != "alice" || st.AnswerID != "a2" {
			t.Fatalf("WaitAnswer = %+v, want alice's answer a2", st)
		}
		if len(st.Answers) < 2 || st.Answers[0].Refusal == nil || st.Answers[0].Refusal.Code != confirmation.RefusedChoice {
			t.Errorf("the refused answer before it: %+v", st.Answers)
		}
	case <-ctx.Done():
		t.Fatal("WaitAnswer did not return")
	}
	// Read back later, the same answer holds.
	st, err := c.Confirmation(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if st.AnswerID != "a2" || len(st.Answers) != 3 || st.Answers[2].Refusal == nil || st.Answers[2].Refusal.Winner.By != "alice" {
		t.Errorf("Confirmation = answer %s, answers %+v", st.AnswerID, st.Answers)
	}
}

func TestWatchPending(t *testing.T) {
	c, bus, ctx := setup(t)
	// Without the indexer the watch cannot know what is open.
	if _, err := c.WatchPending(ctx); events.CodeOf(err) != events.CodeUnavailable {
		t.Fatalf("WatchPending without the indexer: %v, want code unavailable", err)
	}
	// An indexer that has applied nothing yet (it lags): its consumer and
	// bucket exist, its index is empty.
	js := bus.JetStream()
	if err := events.ProvisionBucket(ctx, js, events.DefaultTopology(), events.BucketSpec{Name: readmodel.IndexBucket}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, events.EventStream, jetstream.ConsumerConfig{Durable: readmodel.IndexConsumer, FilterSubjects: events.EventSubjects(), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	ask(t, ctx, bus, "c1") // asked before the watch, not indexed yet
	pending, err := c.WatchPending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask(t, ctx, bus, "c2")
	next := func() client.Pending {
		t.Helper()
		select {
		case p := <-pending:
			return p
		case <-ctx.Done():
			t.Fatal("no pending notice")
		}
		return client.Pending{}
	}
	if p := next(); p.ID != "c1" || p.Closed || p.State.Request.Message != "Release?" {
		t.Fatalf("first notice %+v, want c1 open", p)
	}
	if p := next(); p.ID != "c2" || p.Closed {
		t.Fatalf("second notice %+v, want c2 open", p)
	}
	answer(t, ctx, bus, "c2", "x1", "nope", "eve") // refused: c2 stays open
	answer(t, ctx, bus, "c2", "x2", "cancel", "bob")
	if p := next(); p.ID != "c2" || !p.Closed || p.State.Answer.By != "bob" {
		t.Fatalf("third notice %+v, want c2 closed by bob", p)
	}
}

func TestWaitRun(t *testing.T) {
	c, bus, ctx := setup(t)
	publish(t, ctx, bus, events.RunStarted, "r1", "r1/started", events.RunStartedData{Skill: "s", Driver: "agent"})
	done := make(chan client.Outcome, 1)
	go func() {
		out, err := c.WaitRun(ctx, "r1")
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	idx := 0
	publish(t, ctx, bus, events.RunFailed, "r1", "r1/failed", events.RunFailedData{Step: "a", Index: &idx, Error: events.ErrorInfo{Message: "boom"}})
	select {
	case out := <-done:
		if out.Status != "failed" || out.Failed == nil || out.Failed.Error.Message != "boom" {
			t.Errorf("WaitRun = %+v", out)
		}
	case <-ctx.Done():
		t.Fatal("WaitRun did not return")
	}
	// Retried after it failed: waiting again is not answered by the old
	// failure, but by how the retry ends.
	publish(t, ctx, bus, events.RunResumed, "r1", "r1/resumed", events.RunResumedData{Step: "a", Index: 0, Method: events.MethodAgent, By: "agent/x"})
	go func() {
		out, err := c.WaitRun(ctx, "r1")
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	select {
	case out := <-done:
		t.Fatalf("WaitRun after a retry returned %+v before the run ended again", out)
	case <-time.After(300 * time.Millisecond): // nothing to wait for: the run has not ended
	}
	publish(t, ctx, bus, events.RunCompleted, "r1", "r1/completed", events.RunCompletedData{Summary: "ok"})
	select {
	case out := <-done:
		if out.Status != "completed" {
			t.Errorf("WaitRun after the retry = %+v, want completed", out)
		}
	case <-ctx.Done():
		t.Fatal("WaitRun did not return")
	}
}

// TestLateAnswerNamesTheWinner: a command's conflict reply carries the
// answer that took effect, and the client hands it back as data.
func TestLateAnswerNamesTheWinner(t *testing.T) {
	c, _, ctx := setup(t)
	at := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	svc, err := micro.AddService(c.Conn(), micro.Config{Name: "fake-router", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	winner := &confirmation.AlreadyAnswered{ID: "c1", Winner: confirmation.Winner{EventID: "a1", Choice: "proceed", Method: "user", By: "user:alice", At: at}}
	err = svc.AddEndpoint("answer", micro.HandlerFunc(func(r micro.Request) {
		command.RespondError(r, &events.Error{Code: events.CodeConflict, Message: winner.Error(), Err: winner})
	}), micro.WithEndpointSubject(command.ConfirmAnswer))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Answer(ctx, command.AnswerConfirmation{ID: "c1", Choice: "cancel", By: "user:bob"})
	if events.CodeOf(err) != events.CodeConflict {
		t.Fatalf("Answer error %v, want code conflict", err)
	}
	var late *command.ErrorReply
	if !errors.As(err, &late) || late.Answer == nil || late.Answer.By != "user:alice" || late.Answer.EventID != "a1" || !late.Answer.At.Equal(at) {
		t.Fatalf("the conflict does not name the winner: %#v", late)
	}
	// With nobody serving a command the error says so.
	_, err = c.Cancel(ctx, command.CancelRun{RunID: "r1"})
	if events.CodeOf(err) != events.CodeUnavailable {
		t.Errorf("Cancel with no runner: %v, want code unavailable", err)
	}
}
