package confirm_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/confirm"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDeadlineDurableRecreated deletes the router's durable of fired
// deadlines (as `nats consumer rm` does): the router makes it again, so a
// deadline that fires afterwards still expires its confirmation, and one
// that expired before is not expired again; a restart of the router keeps
// the recreated durable.
func TestDeadlineDurableRecreated(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	svcs := start(t, env, router(confirm.Config{}))
	bus := env.Bus(t)
	expired := func(id string) error {
		if n := len(ofType(logOf(t, bus, "confirm", id), events.ConfirmExpired)); n != 1 {
			return fmt.Errorf("%s has %d expired events", id, n)
		}
		return nil
	}
	ask(t, bus, "c-before", events.ConfirmRequestedData{TimeoutS: 1, Default: "cancel"})
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return expired("c-before") })
	if err := bus.JetStream().DeleteConsumer(ctxFor(t, 5*time.Second), events.EventStream, confirm.DeadlineConsumerName); err != nil {
		t.Fatal(err)
	}
	ask(t, bus, "c-after", events.ConfirmRequestedData{TimeoutS: 1, Default: "cancel"})
	eventstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error { return expired("c-after") })
	if err := expired("c-before"); err != nil {
		t.Fatal(err)
	}
	c, err := bus.JetStream().Consumer(ctxFor(t, 5*time.Second), events.EventStream, confirm.DeadlineConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.DeliverPolicy != jetstream.DeliverByStartSequencePolicy || cfg.OptStartSeq == 0 {
		t.Fatalf("the durable was not made again after the last acknowledged deadline: %v from %d", cfg.DeliverPolicy, cfg.OptStartSeq)
	}
	rt := svcs[0].rt
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		rt.PollConsumers(ctxFor(t, 5*time.Second))
		if h := rt.Health(); h.Status != service.StatusOK {
			return errors.New(fmt.Sprint(h.Status, h.Reasons))
		}
		return nil
	})
	// A restart keeps the recreated durable (its start cannot be updated).
	svcs[0].stop()
	start(t, env, router(confirm.Config{}))
	ask(t, bus, "c-restart", events.ConfirmRequestedData{TimeoutS: 1, Default: "cancel"})
	eventstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error { return expired("c-restart") })
}
