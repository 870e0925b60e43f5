package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
)

// TestHealthDegradedOnLag: a consumer whose backlog passes the threshold
// makes the service degraded, with the consumer and its lag in the reason;
// once it has worked the backlog off the service is ok again. The lag
// gauge follows.
func TestHealthDegradedOnLag(t *testing.T) {
	env := eventstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := service.Connect(ctx, "lagger", env.URL(), eventstest.Logger(t), events.DefaultTopology())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	rt.SetHealthConfig(service.HealthConfig{LagThreshold: 5, PollEvery: time.Hour, StallAfter: time.Hour})
	gate := make(chan struct{})
	c, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{Name: "slow", Filters: []string{"heed.run.>"}, MaxAckPending: 1, Logger: rt.Log},
		func(ctx context.Context, d *events.Delivery) ([]events.Event, error) {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return nil, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	var openGate sync.Once
	release := func() { openGate.Do(func() { close(gate) }) }
	defer func() {
		// Let the handler go before stopping, even when the test failed
		// early: Stop waits for deliveries in hand.
		release()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		c.Stop(sctx)
	}()
	for i := range 20 {
		ev, err := events.NewEvent(events.RunStarted, fmt.Sprintf("lag-%d", i), fmt.Sprintf("lag-%d/started", i), "test", map[string]string{"skill": "s", "driver": "agent"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Bus.Publish(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	// A poll can fail on a busy machine (its request times out): ask again
	// until the backlog shows.
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		rt.PollConsumers(ctx)
		h := rt.Health()
		if h.Status != service.StatusDegraded || len(h.Reasons) != 1 || !strings.Contains(h.Reasons[0], "slow lags 20 events (threshold 5)") {
			return fmt.Errorf("health with a backlog: %s %q", h.Status, h.Reasons)
		}
		return nil
	})
	if v := lagGauge(t, rt); v != 20 {
		t.Fatalf("lag gauge %v with a backlog of 20", v)
	}
	release()
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		rt.PollConsumers(ctx)
		if h := rt.Health(); h.Status != service.StatusOK {
			return fmt.Errorf("health: %s %q", h.Status, h.Reasons)
		}
		// Health is ok below the threshold; the gauge follows the last
		// poll, which may still count the final few.
		if v := lagGauge(t, rt); v != 0 {
			return fmt.Errorf("lag gauge %v after the backlog, want 0", v)
		}
		return nil
	})
}

// lagGauge is the value of the runtime's one heed_consumer_lag series.
func lagGauge(t *testing.T, rt *service.Runtime) float64 {
	t.Helper()
	mf, err := rt.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range mf {
		if f.GetName() == "heed_consumer_lag" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no single heed_consumer_lag series")
	return 0
}

// TestHealthDegradedWhenStalled: a consumer with events waiting whose
// delivered position does not move for StallAfter is reported stopped.
func TestHealthDegradedWhenStalled(t *testing.T) {
	env := eventstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := service.Connect(ctx, "staller", env.URL(), eventstest.Logger(t), events.DefaultTopology())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	rt.SetHealthConfig(service.HealthConfig{PollEvery: time.Hour, StallAfter: 200 * time.Millisecond})
	gate := make(chan struct{})
	c, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{Name: "stuck", Filters: []string{"heed.run.>"}, MaxAckPending: 1, Logger: rt.Log},
		func(ctx context.Context, d *events.Delivery) ([]events.Event, error) {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return nil, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	defer close(gate)
	for i := range 3 {
		ev, err := events.NewEvent(events.RunStarted, fmt.Sprintf("stall-%d", i), fmt.Sprintf("stall-%d/started", i), "test", map[string]string{"skill": "s", "driver": "agent"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Bus.Publish(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	rt.PollConsumers(ctx)
	if h := rt.Health(); h.Status != service.StatusOK {
		t.Fatalf("health at once: %s %q", h.Status, h.Reasons)
	}
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		rt.PollConsumers(ctx)
		h := rt.Health()
		if h.Status != service.StatusDegraded || len(h.Reasons) != 1 || !strings.Contains(h.Reasons[0], "stuck has taken no event") || !strings.Contains(h.Reasons[0], "stopped") {
			return fmt.Errorf("health: %s %q", h.Status, h.Reasons)
		}
		return nil
	})
}
