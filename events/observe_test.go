package events_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
)

// obsRecorder is an Observer that remembers what it saw.
type obsRecorder struct {
	mu        sync.Mutex
	published map[string]int
	consumed  map[events.Outcome]int
	lost      int
	recreated []uint64
}

func newObsRecorder() *obsRecorder {
	return &obsRecorder{published: map[string]int{}, consumed: map[events.Outcome]int{}}
}

func (r *obsRecorder) Published(t string) { r.mu.Lock(); r.published[t]++; r.mu.Unlock() }
func (r *obsRecorder) Consumed(_, _ string, o events.Outcome) {
	r.mu.Lock()
	r.consumed[o]++
	r.mu.Unlock()
}
func (r *obsRecorder) DeadLettered(string, events.Code) {}
func (r *obsRecorder) ConsumerStarted(*events.Consumer) {}
func (r *obsRecorder) ConsumerStopped(*events.Consumer) {}
func (r *obsRecorder) ConsumerLost(*events.Consumer, error) {
	r.mu.Lock()
	r.lost++
	r.mu.Unlock()
}
func (r *obsRecorder) ConsumerRecreated(_ *events.Consumer, from uint64) {
	r.mu.Lock()
	r.recreated = append(r.recreated, from)
	r.mu.Unlock()
}

// TestConsumerRecreatedAfterDelete deletes a consumer's durable (as `nats
// consumer rm` does) while events flow: the consumer notices, recreates it
// after the last acknowledged sequence and goes on; every event is handled,
// none skipped, and the observer saw the loss and the recreation.
func TestConsumerRecreatedAfterDelete(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	rec := newObsRecorder()
	bus.SetObserver(rec)
	ctx := testCtx(t)
	var mu sync.Mutex
	seen := map[string]int{}
	c, err := events.Consume(ctx, bus, events.ConsumerConfig{Name: "recreate-me", Filters: []string{"heed.run.>"}, Logger: eventstest.Logger(t)},
		func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
			mu.Lock()
			seen[d.Event.ID()]++
			mu.Unlock()
			return nil, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	const n = 400
	pub := func(i int) {
		publish(t, bus, newEvent(t, events.RunStarted, fmt.Sprintf("r%d", i), fmt.Sprintf("r%d:started", i), runStartedData))
	}
	for i := range n / 2 {
		pub(i)
	}
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < n/4 {
			return fmt.Errorf("%d handled", len(seen))
		}
		return nil
	})
	if _, err := c.Info(ctx); err != nil { // the floor, as the health poll reads it
		t.Fatal(err)
	}
	js := jsOf(t, env)
	if err := js.DeleteConsumer(ctx, events.EventStream, "recreate-me"); err != nil {
		t.Fatal(err)
	}
	for i := n / 2; i < n; i++ {
		pub(i)
	}
	eventstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < n {
			return fmt.Errorf("%d of %d events handled", len(seen), n)
		}
		return nil
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.lost == 0 || len(rec.recreated) == 0 {
		t.Fatalf("observer saw %d losses, recreations %v", rec.lost, rec.recreated)
	}
	if rec.published[string(events.RunStarted)] != n || rec.consumed[events.OutcomeAcked] < n {
		t.Fatalf("observer counted %d published, %d acked; want %d", rec.published[string(events.RunStarted)], rec.consumed[events.OutcomeAcked], n)
	}
	if c.Lost() != nil {
		t.Fatalf("still lost: %v", c.Lost())
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.DeliverPolicy.String() == "all" || info.Config.OptStartSeq == 0 || info.Config.OptStartSeq > uint64(n/2)+1 {
		t.Fatalf("recreated durable starts at %v seq %d", info.Config.DeliverPolicy, info.Config.OptStartSeq)
	}
	// A restart of the service (Consume again) keeps the recreated durable.
	c.Stop(context.Background())
	c2, err := events.Consume(ctx, bus, events.ConsumerConfig{Name: "recreate-me", Filters: []string{"heed.run.>"}, Logger: eventstest.Logger(t)},
		func(context.Context, *events.Delivery) ([]events.Event, error) { return nil, nil })
	if err != nil {
		t.Fatalf("consume again over the recreated durable: %v", err)
	}
	c2.Stop(context.Background())
}
