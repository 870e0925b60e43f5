package escalator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/service/servicetest"
	"github.com/heedhq/heed/services/escalator"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// A request is decided once: the escalator's consumer also receives the
// requested event the command wrote, and while the command is still
// writing the rest it waits for it instead of reading and deciding the
// same request beside it (a race the consumer lost every time, reading
// the log twice and deciding twice on the way).
func TestRequestDecidedOnce(t *testing.T) {
	env := eventstest.Start(t)
	var (
		mu  sync.Mutex
		reg *prometheus.Registry
	)
	servicetest.Start(t, env, "escalator", func(ctx context.Context, rt *service.Runtime) error {
		mu.Lock()
		reg = rt.Metrics.Registry
		mu.Unlock()
		return escalator.Run(ctx, rt, escalator.Config{})
	})
	const n = 60
	nc := env.Conn(t)
	requestAll(t, nc, n, func(i int) command.RequestEscalation {
		risk := []float64{0.1, 0.5, 0.8}[i%3] // auto approved; offered to tier1; to tier2
		return command.RequestEscalation{ID: fmt.Sprintf("once-%02d", i),
			EscalationRequestedData: events.EscalationRequestedData{Session: fmt.Sprintf("agent/%d", i%7), Operation: "deploy", Risk: &risk, Confidence: new(0.9)}}
	})
	// The consumer has handled every requested event.
	js := env.Bus(t).JetStream()
	eventstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		ci, err := js.Consumer(ctxT(t), events.EventStream, escalator.ConsumerName)
		if err != nil {
			return err
		}
		info, err := ci.Info(ctxT(t))
		if err != nil {
			return err
		}
		if info.NumPending+uint64(info.NumAckPending) > 0 {
			return fmt.Errorf("consumer: %d pending, %d unacked", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	mu.Lock()
	mfs, err := reg.Gather()
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var decided uint64
	for _, mf := range mfs {
		if mf.GetName() == "heed_escalation_decide_seconds" {
			decided = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if decided != n {
		t.Errorf("%d requests decided %d times; want once each", n, decided)
	}
}

// Two escalator processes share the consumer and the request command: a
// request's requested event may reach the other process's consumer while
// the command is still writing, which then writes the rest first. The
// command's reply must still be the escalation the log holds, complete.
func TestRequestReplyAgreesWithTheLogAcrossProcesses(t *testing.T) {
	env := eventstest.Start(t)
	for i := range 2 {
		servicetest.Start(t, env, fmt.Sprintf("escalator-%d", i), func(ctx context.Context, rt *service.Runtime) error {
			return escalator.Run(ctx, rt, escalator.Config{})
		})
	}
	const n = 80
	nc := env.Conn(t)
	replies := requestAll(t, nc, n, func(i int) command.RequestEscalation {
		id := ""
		if i%2 == 0 {
			id = fmt.Sprintf("two-%02d", i)
		}
		risk := []float64{0.1, 0.5}[(i/2)%2] // named and unnamed, each auto approved and offered
		return command.RequestEscalation{ID: id,
			EscalationRequestedData: events.EscalationRequestedData{Session: fmt.Sprintf("agent/%d", i%9), Operation: "deploy", Risk: &risk, Confidence: new(0.9)}}
	})
	for i, r := range replies {
		var st command.EscalationState
		if err := command.Call(ctxT(t), nc, command.EscalationStatus, command.EscalationStatusRequest{ID: r.ID}, &st); err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Status != st.Status:
			t.Errorf("request %d (%s): replied %s, the log says %s", i, r.ID, r.Status, st.Status)
		case r.Status == events.EscalationHeld && (r.Offer == nil || len(st.Offers) == 0 || r.Offer.ConfirmID != st.Offers[len(st.Offers)-1].ConfirmID):
			t.Errorf("request %d (%s): held, replied offer %+v, the log's offers %+v", i, r.ID, r.Offer, st.Offers)
		case r.Status == events.EscalationApproved && st.Decided == nil:
			t.Errorf("request %d (%s): replied approved, not decided in the log", i, r.ID)
		}
	}
}

// requestAll waits until the escalator answers its commands, then sends n
// requests at once (request(i) is the i-th) and returns the replies in
// order; any error fails the test.
func requestAll(t *testing.T, nc *nats.Conn, n int, request func(i int) command.RequestEscalation) []command.EscalationReply {
	t.Helper()
	eventstest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		return command.Call(ctxT(t), nc, command.EscalationHeld, command.HeldRequest{}, &command.HeldReply{})
	})
	replies := make([]command.EscalationReply, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- command.Call(ctxT(t), nc, command.EscalationRequest, request(i), &replies[i])
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return replies
}
