package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// cachedProjector provisions p's bucket and runs p in processes
// processes (each its own connection), with the cache used for every
// event (not only when behind).
func cachedProjector(t *testing.T, p events.Projection, processes int) (*events.Bus, jetstream.KeyValue) {
	t.Helper()
	events.ProjCacheBehind(t, 0)
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	ctx := testCtx(t)
	if err := events.ProvisionBucket(ctx, js, events.DefaultTopology(), events.BucketSpec{Name: p.Bucket()}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, p.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	for i := range processes {
		b := bus
		if i > 0 {
			b = env.Bus(t)
		}
		c, err := events.RunProjector(ctx, b, p, eventstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopConsumer(c) })
	}
	return bus, kv
}

// A projector reads back what it wrote from memory, but never folds an
// event into a value someone else has changed since: a write between two
// events (here what `heed replay --apply` or a second process could do)
// makes the next event's guarded write fail, and the event is folded again
// from the bucket.
func TestProjectorCacheSeesAnotherWriter(t *testing.T) {
	p := countProjection{bucket: "test_cache"}
	bus, kv := cachedProjector(t, p, 1)
	js, ctx := bus.JetStream(), testCtx(t)
	for i := range 2 {
		publish(t, bus, newEvent(t, events.RunStepFailed, "a", fmt.Sprintf("a%d", i), stepFailedData))
	}
	waitIdle(t, js, events.ProjectorName(p))
	// Another writer sets the count to 100, keeping the envelope's
	// sequence (a repair writes what a rebuild holds).
	e, err := kv.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	var live liveEntry
	if err := json.Unmarshal(e.Value(), &live); err != nil {
		t.Fatal(err)
	}
	var rc runCount
	if err := json.Unmarshal(live.Value, &rc); err != nil {
		t.Fatal(err)
	}
	if rc.Events != 2 {
		t.Fatalf("count %d after 2 events", rc.Events)
	}
	rc.Events = 100
	live.Value, _ = json.Marshal(rc)
	b, _ := json.Marshal(live)
	if _, err := kv.Update(ctx, "a", b, e.Revision()); err != nil {
		t.Fatal(err)
	}
	// Within the cache's idle window: the reads would come from memory.
	publish(t, bus, newEvent(t, events.RunStepFailed, "a", "a2", stepFailedData))
	waitIdle(t, js, events.ProjectorName(p))
	counts, _ := readCounts(t, kv)
	if got := counts["a"].Events; got != 101 {
		t.Errorf("count %d after another writer set 100 and one more event; want 101", got)
	}
}

// Two processes running the same projector (one durable consumer, one
// event in flight) take turns with its events: every count is exact.
func TestProjectorCacheTwoProcesses(t *testing.T) {
	p := countProjection{bucket: "test_cache2"}
	bus, kv := cachedProjector(t, p, 2)
	js, ctx := bus.JetStream(), testCtx(t)
	want := map[string]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				agg := fmt.Sprintf("g%d", (w+i)%5)
				if _, err := bus.Publish(ctx, newEvent(t, events.RunStepFailed, agg, fmt.Sprintf("w%d-%d", w, i), stepFailedData)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for w := range 4 {
		for i := range 50 {
			want[fmt.Sprintf("g%d", (w+i)%5)]++
		}
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	waitIdle(t, js, events.ProjectorName(p))
	counts, _ := readCounts(t, kv)
	assertCounts(t, "two projectors", counts, want)
}

// flagProjection counts an aggregate's events only once the key "flag"
// exists: a fold that may read and write nothing.
type flagProjection struct{ bucket string }

func (p flagProjection) Name() string      { return "flags" }
func (p flagProjection) Bucket() string    { return p.bucket }
func (p flagProjection) Filters() []string { return []string{"heed.run.>"} }
func (p flagProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	var flag, c runCount
	if found, err := s.Get(ctx, "flag", &flag); err != nil || !found {
		return err
	}
	if _, err := s.Get(ctx, ev.Subject(), &c); err != nil {
		return err
	}
	c.Events++
	return s.Put(ctx, ev.Subject(), c)
}

// A fold that read from the cache and wrote nothing has no write whose
// guard would notice another writer: it checks that the bucket has not
// moved before its event counts as folded.
func TestProjectorCacheReadOnlyFoldSeesAnotherWriter(t *testing.T) {
	p := flagProjection{bucket: "test_flags"}
	bus, kv := cachedProjector(t, p, 1)
	js, ctx := bus.JetStream(), testCtx(t)
	// On a bucket of one replica the look is a direct get, not the
	// stream API's message get (a JSON request and an API advisory).
	apiGets, err := js.Conn().SubscribeSync("$JS.API.STREAM.MSG.GET.KV_" + p.bucket)
	if err != nil {
		t.Fatal(err)
	}
	directGets, err := js.Conn().SubscribeSync("$JS.API.DIRECT.GET.KV_" + p.bucket)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, bus, newEvent(t, events.RunStepFailed, "a", "a0", stepFailedData)) // no flag: nothing written
	waitIdle(t, js, events.ProjectorName(p))
	if _, err := kv.Create(ctx, "flag", []byte(`{"seq":1,"value":{"events":1}}`)); err != nil {
		t.Fatal(err)
	}
	publish(t, bus, newEvent(t, events.RunStepFailed, "a", "a1", stepFailedData))
	waitIdle(t, js, events.ProjectorName(p))
	counts, _ := readCounts(t, kv)
	if got := counts["a"].Events; got != 1 {
		t.Errorf("a counted %d after the flag appeared and one more event; want 1", got)
	}
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	pending := func(s *nats.Subscription) int {
		n, _, err := s.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n, d := pending(apiGets), pending(directGets); n != 0 || d == 0 {
		t.Errorf("%d stream API message gets and %d direct gets of the bucket; want none and some", n, d)
	}
}
