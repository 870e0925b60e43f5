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
	nc := env.Conn(t)
	eventstest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		return command.Call(ctxT(t), nc, command.EscalationHeld, command.HeldRequest{}, &command.HeldReply{})
	})
	const n = 60
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			risk := []float64{0.1, 0.5, 0.8}[i%3] // auto approved; offered to tier1; to tier2
			var r command.EscalationReply
			errs <- command.Call(ctxT(t), nc, command.EscalationRequest, command.RequestEscalation{ID: fmt.Sprintf("once-%02d", i),
				EscalationRequestedData: events.EscalationRequestedData{Session: fmt.Sprintf("agent/%d", i%7), Operation: "deploy", Risk: &risk, Confidence: new(0.9)}}, &r)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
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
