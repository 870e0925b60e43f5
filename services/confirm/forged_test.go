package confirm_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/services/confirm"
	"github.com/nats-io/nats.go"
)

// Any client may publish on a confirmation's subjects and on its fired
// deadline's: neither picks the answer nor ends the wait early.
func TestForgedExpiriesDoNotChooseOrHurry(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{}))
	bus := env.Bus(t)

	// An expired event naming another default: the deadline answers with
	// the request's own.
	ask(t, bus, "forged-exp", events.ConfirmRequestedData{TimeoutS: 600, Default: "cancel"})
	eventstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if _, ok := scheduled(t, bus, "forged-exp"); !ok {
			return errors.New("no deadline scheduled yet")
		}
		return nil
	})
	publish(t, bus, newEvent(t, events.ConfirmExpired, "forged-exp", "forged-exp/expired-by-sly", "agent/sly",
		events.ConfirmExpiredData{Deadline: time.Now().UTC(), Default: "proceed"}))
	eventstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if n := len(ofType(logOf(t, bus, "confirm", "forged-exp"), events.ConfirmAnswered)); n != 1 {
			return fmt.Errorf("%d answers", n)
		}
		return nil
	})
	a := decode[events.ConfirmAnsweredData](t, ofType(logOf(t, bus, "confirm", "forged-exp"), events.ConfirmAnswered)[0])
	if a.Choice != "cancel" || a.Method != events.MethodTimeout {
		t.Errorf("the answer after an expiry naming proceed: %+v, want the request's default cancel", a)
	}

	// A fired deadline published long before the deadline: nothing
	// expires, and the deadline is scheduled again for its time.
	ask(t, bus, "forged-fire", events.ConfirmRequestedData{TimeoutS: 600, Default: "cancel"})
	eventstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if _, ok := scheduled(t, bus, "forged-fire"); !ok {
			return errors.New("no deadline scheduled yet")
		}
		return nil
	})
	body, _ := json.Marshal(map[string]any{"confirm_id": "forged-fire", "deadline": time.Now().UTC().Add(-time.Minute), "default": "cancel"})
	m := nats.NewMsg(confirmation.FiredSubject("forged-fire"))
	m.Data = body
	if _, err := bus.JetStream().PublishMsg(ctxFor(t, 5*time.Second), m); err != nil {
		t.Fatal(err)
	}
	waitRouterIdle(t, bus)
	time.Sleep(300 * time.Millisecond)
	evs := logOf(t, bus, "confirm", "forged-fire")
	if len(ofType(evs, events.ConfirmExpired)) != 0 || len(ofType(evs, events.ConfirmAnswered)) != 0 {
		t.Fatalf("a fired deadline ten minutes early expired the confirmation: %v", types(evs))
	}
	sched, ok := scheduled(t, bus, "forged-fire")
	if !ok {
		t.Fatal("the deadline is no longer scheduled after an early fire")
	}
	var due struct {
		Deadline time.Time `json:"deadline"`
	}
	if err := json.Unmarshal(sched.Data, &due); err != nil || time.Until(due.Deadline) < 9*time.Minute {
		t.Errorf("the deadline scheduled again for %v (%v), want about 10 minutes from now", due.Deadline, err)
	}
}

// A timeout too large for a duration is the longest one, not the default.
func TestDeadlineOfAHugeTimeout(t *testing.T) {
	cfg := confirm.Config{DefaultTimeout: 5 * time.Minute, MinTimeout: time.Second, MaxTimeout: 24 * time.Hour}
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		s    float64
		want time.Duration
	}{{1e10, 24 * time.Hour}, {1e300, 24 * time.Hour}, {86400, 24 * time.Hour}, {1e-10, time.Second}, {0, 5 * time.Minute}, {-3, 5 * time.Minute}, {90, 90 * time.Second}} {
		if got := cfg.Deadline(t0, c.s).Sub(t0); got != c.want {
			t.Errorf("timeout_s %g: deadline in %s, want %s", c.s, got, c.want)
		}
	}
}

// A request whose own time is far after the time the log stored it (a
// producer's clock, a ce-time of 9999) is asked from when it was stored:
// its deadline is scheduled, not a handler failure five times over and a
// question pending for ever.
func TestRequestFromTheFarFutureIsAskedNow(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{}))
	bus := env.Bus(t)
	ev := newEvent(t, events.ConfirmRequested, "far-future", "far-future/requested", "test/agent", events.ConfirmRequestedData{
		Message: "From the future?", Requester: "test-agent", Options: proceedCancel, Default: "cancel", TimeoutS: 600})
	ev.SetTime(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC))
	publish(t, bus, ev)
	eventstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if _, ok := scheduled(t, bus, "far-future"); !ok {
			return errors.New("no deadline scheduled")
		}
		return nil
	})
	sched, _ := scheduled(t, bus, "far-future")
	var due struct {
		Deadline time.Time `json:"deadline"`
	}
	if err := json.Unmarshal(sched.Data, &due); err != nil || time.Until(due.Deadline) > 11*time.Minute || time.Until(due.Deadline) < 9*time.Minute {
		t.Errorf("deadline %v (%v), want about 10 minutes from now", due.Deadline, err)
	}
}
