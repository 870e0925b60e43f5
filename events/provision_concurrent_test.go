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
	"github.com/nats-io/nats.go/jetstream"
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

	// A real change: the event stream's age limit.
	changed := topo
	changed.Events.MaxAge = 10 * 365 * 24 * time.Hour
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
	if info.Config.MaxAge != changed.Events.MaxAge || info.State.Msgs != 1 {
		t.Fatalf("after the change: max age %v, %d messages; want %v, 1", info.Config.MaxAge, info.State.Msgs, changed.Events.MaxAge)
	}
	for _, b := range topo.Buckets {
		if _, err := bus.JetStream().KeyValue(ctx, b.Name); err != nil {
			t.Fatalf("bucket %s: %v", b.Name, err)
		}
	}
}

// editThenProvision starts a server, lets edit change stream's
// configuration as an operator would (nats stream edit), provisions
// heed's topology again (at most 10 s: a configuration the server refuses
// is retried until then) and returns the stream's configuration before
// the edit and after the provisioning.
func editThenProvision(t *testing.T, stream string, edit func(*jetstream.StreamConfig)) (before, after jetstream.StreamConfig) {
	t.Helper()
	env := eventstest.Start(t)
	ctx := testCtx(t)
	js := env.Bus(t).JetStream()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	before = s.CachedInfo().Config
	cfg := before
	edit(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := events.Provision(pctx, js, events.DefaultTopology()); err != nil {
		t.Fatalf("provision: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return before, info.Config
}

// The duplicate window of an existing stream is the operator's (nats stream
// edit --dupe-window): provisioning leaves it as it is, applies the rest,
// and gives a new stream heed's.
func TestProvisionKeepsTheOperatorsDuplicateWindow(t *testing.T) {
	before, after := editThenProvision(t, events.EventStream, func(c *jetstream.StreamConfig) {
		c.Duplicates = 2 * time.Minute
		c.Description = "edited by hand"
	})
	if d := before.Duplicates; d != events.DefaultTopology().Events.Duplicates {
		t.Fatalf("a new stream's window is %v, want heed's %v", d, events.DefaultTopology().Events.Duplicates)
	}
	if after.Duplicates != 2*time.Minute {
		t.Errorf("provisioning set the window back to %v", after.Duplicates)
	}
	if after.Description == "edited by hand" {
		t.Error("provisioning left the rest of an edited configuration as it was")
	}
}

// A window kept from an existing stream never exceeds the age limit heed
// gives the stream (the server refuses such a configuration, and every
// service's start would fail on it).
func TestProvisionKeptWindowFitsTheAgeLimit(t *testing.T) {
	_, after := editThenProvision(t, events.DLQStream, func(c *jetstream.StreamConfig) {
		c.MaxAge, c.Duplicates = 90*24*time.Hour, 60*24*time.Hour
	})
	want := events.DefaultTopology().DLQ.MaxAge
	if after.MaxAge != want || after.Duplicates != want {
		t.Errorf("max age %v, window %v; want both %v", after.MaxAge, after.Duplicates, want)
	}
}
