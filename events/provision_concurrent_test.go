package events_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
)

// TestProvisionLeavesUnchangedAlone provisions the same topology from
// several connections at once, twice: the streams and buckets are created
// once and never updated (no update advisory), until a setting really
// changes; then exactly the changed stream is updated and keeps its data.
func TestProvisionLeavesUnchangedAlone(t *testing.T) {
	env := eventstest.Start(t)
	ctx := testCtx(t)
	nc := env.Conn(t)
	var mu sync.Mutex
	var updated []string
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.>", func(m *nats.Msg) {
		mu.Lock()
		updated = append(updated, strings.TrimPrefix(m.Subject, "$JS.EVENT.ADVISORY.STREAM.UPDATED."))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	bus := env.Bus(t)
	if _, err := bus.Publish(ctx, newEvent(t, events.RunStepFailed, "ra", "ra/1", stepFailedData)); err != nil {
		t.Fatal(err)
	}

	topo := events.DefaultTopology()
	topo.Buckets = []events.BucketSpec{{Name: "test_a", Description: "a"}, {Name: "test_b", Description: "b", History: 5}}
	provisionAll := func(topo events.Topology) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			b := env.Bus(t)
			wg.Go(func() {
				if err := events.Provision(ctx, b.JetStream(), topo); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("provision: %v", err)
		}
	}
	provisionAll(topo)
	provisionAll(topo)

	// A real change: the event stream's duplicate window.
	changed := topo
	changed.Events.Duplicates = 5 * time.Minute
	provisionAll(changed)
	// Advisories arrive in order: once the change's has come, any update
	// before it would have come too.
	eventstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(updated) == 0 {
			return fmt.Errorf("no update advisory for the changed stream")
		}
		return nil
	})
	mu.Lock()
	for _, name := range updated {
		if name != events.EventStream {
			t.Errorf("unchanged configuration updated: %v", updated)
			break
		}
	}
	mu.Unlock()

	s, err := bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Duplicates != 5*time.Minute || info.State.Msgs != 1 {
		t.Fatalf("after the change: duplicates %v, %d messages; want 5m0s, 1", info.Config.Duplicates, info.State.Msgs)
	}
	for _, b := range topo.Buckets {
		if _, err := bus.JetStream().KeyValue(ctx, b.Name); err != nil {
			t.Fatalf("bucket %s: %v", b.Name, err)
		}
	}
}
