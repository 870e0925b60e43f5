package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go/jetstream"
)

// A bucket cache with a key filter holds the keys that match it and none
// of the others, from the initial values on and as the bucket changes.
func TestWatchBucketFiltered(t *testing.T) {
	env := eventstest.Start(t)
	js := env.Bus(t).JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "filtered"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, value string) {
		t.Helper()
		if _, err := kv.Put(ctx, key, []byte(`{"seq":1,"value":`+value+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	put("pat-1", `1`)
	put("call.run-1", `2`)
	put("tool.kube", `3`)
	keys := []string{"*"}
	c, err := events.WatchBucket(ctx, js, "filtered", keys...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	// nats.go rewrites the filters it is given into subjects: the
	// caller's (and a retry's) keys must stay keys.
	if keys[0] != "*" {
		t.Fatalf("WatchBucket changed its caller's keys to %q", keys)
	}
	<-c.Ready()
	put("call.run-2", `4`)
	put("pat-2", `5`)
	eventstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		var v int
		if !c.Get("pat-2", &v) || v != 5 {
			return errors.New("pat-2 not in the cache yet")
		}
		return nil
	})
	var held []string
	c.Each(func(k string, _ json.RawMessage) bool { held = append(held, k); return true })
	if len(held) != 2 {
		t.Fatalf("the cache holds %v, want pat-1 and pat-2 alone", held)
	}
	for _, k := range []string{"call.run-1", "call.run-2", "tool.kube"} {
		var v int
		if c.Get(k, &v) {
			t.Errorf("the cache holds %s", k)
		}
	}
}
