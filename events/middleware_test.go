package events_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
)

// TestRetryMiddlewareRecoversInProcess: a handler that fails twice and then
// succeeds is retried in the process; the event is never redelivered by
// the server and the consumer counts no retry.
func TestRetryMiddlewareRecoversInProcess(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	publish(t, bus, newEvent(t, events.ConfirmAnswered, "c1", "answer:c1", answeredData))
	var calls atomic.Int32
	var delivered atomic.Uint64
	c := consume(t, bus, events.ConsumerConfig{Name: "retrying", Middleware: []events.Middleware{events.Retry(5, time.Millisecond)}},
		func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
			delivered.Store(d.Delivered)
			if calls.Add(1) < 3 {
				return nil, errors.New("nats: timeout")
			}
			return nil, nil
		})
	waitIdle(t, bus.JetStream(), "retrying")
	if n := calls.Load(); n != 3 {
		t.Errorf("handler called %d times, want 3", n)
	}
	if d := delivered.Load(); d != 1 {
		t.Errorf("the server delivered the event %d times, want once", d)
	}
	if s := c.Stats(); s.Handled != 1 || s.Retried != 0 || s.DeadLettered != 0 {
		t.Errorf("stats = %+v", s)
	}
}

// TestRetryMiddlewareLeavesPoisonAlone: a poison error is not retried, and
// PoisonIf makes an error poison.
func TestRetryMiddlewareLeavesPoisonAlone(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	publish(t, bus, newEvent(t, events.ConfirmAnswered, "c1", "answer:c1", answeredData))
	var calls atomic.Int32
	badInput := errors.New("the step index names no step")
	c := consume(t, bus, events.ConsumerConfig{Name: "poisoning", Middleware: []events.Middleware{
		events.Retry(5, time.Millisecond),
		events.PoisonIf(func(err error) bool { return errors.Is(err, badInput) }),
	}}, func(context.Context, *events.Delivery) ([]events.Event, error) {
		calls.Add(1)
		return nil, badInput
	})
	waitIdle(t, bus.JetStream(), "poisoning")
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want once", n)
	}
	if s := c.Stats(); s.DeadLettered != 1 {
		t.Errorf("stats = %+v, want the event dead-lettered", s)
	}
}

// TestRecoverKeepsTheStack: a panic's dead letter says where it happened.
func TestRecoverKeepsTheStack(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	publish(t, bus, newEvent(t, events.ConfirmAnswered, "c1", "answer:c1", answeredData))
	consume(t, bus, events.ConsumerConfig{Name: "panicky"}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		var steps []string
		return nil, errors.New(steps[d.Seq]) // index out of range: a bug
	})
	waitIdle(t, bus.JetStream(), "panicky")
	dl := lastMsg(t, bus.JetStream(), events.DLQStream, "heed.dlq.confirm.c1.answered")
	reason := dl.Header.Get(events.HeaderDLQReason)
	if !strings.Contains(reason, "index out of range") || !strings.Contains(reason, "middleware_test.go") {
		t.Errorf("dead letter reason lacks the panic or its stack: %q", reason)
	}
}

func TestRetryStale(t *testing.T) {
	ctx := context.Background()
	n := 0
	got, err := events.RetryStale(ctx, 10, func() (int, error) {
		n++
		if n < 4 {
			return 0, &events.Error{Code: events.CodeConflict, Message: "someone appended", Err: events.ErrStaleRead}
		}
		return n, nil
	})
	if err != nil || got != 4 {
		t.Errorf("RetryStale = %d, %v; want 4 after three lost races", got, err)
	}
	n = 0
	other := events.Errorf(events.CodeConflict, "already answered") // a conflict, but not a stale read
	if _, err := events.RetryStale(ctx, 10, func() (int, error) { n++; return 0, other }); !errors.Is(err, other) || n != 1 {
		t.Errorf("a non-conflict error: %v after %d attempts, want it at once", err, n)
	}
	n = 0
	if _, err := events.RetryStale(ctx, 3, func() (int, error) { n++; return 0, events.ErrStaleRead }); !errors.Is(err, events.ErrStaleRead) || n != 3 {
		t.Errorf("always conflicting: %v after %d attempts, want ErrConflict after 3", err, n)
	}
}

func TestRoutes(t *testing.T) {
	r := events.NewRoutes()
	var got *events.ConfirmAnsweredData
	events.On(r, events.ConfirmAnswered, func(_ context.Context, _ *events.Delivery, d *events.ConfirmAnsweredData) ([]events.Event, error) {
		got = d
		return nil, nil
	})
	ans := newEvent(t, events.ConfirmAnswered, "c1", "answer:c1", answeredData)
	if _, err := r.Handle(context.Background(), &events.Delivery{Event: ans}); err != nil || got == nil || got.Choice != "yes" || got.By != "alice" {
		t.Errorf("routed data = %+v, %v", got, err)
	}
	other := newEvent(t, events.RunResumed, "r1", "resumed:r1", resumedData)
	if out, err := r.Handle(context.Background(), &events.Delivery{Event: other}); out != nil || err != nil {
		t.Errorf("an unrouted type: %v, %v; want it left alone", out, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a route whose Go type is not the event's data type must panic at registration")
		}
	}()
	events.On(r, events.RunResumed, func(context.Context, *events.Delivery, *events.ConfirmAnsweredData) ([]events.Event, error) {
		return nil, nil
	})
}
