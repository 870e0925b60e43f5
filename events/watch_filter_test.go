package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
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

// TestScanBucket passes the current value of every live key that matches
// the filter, each once, and ends: overwritten keys give their last value,
// deleted and purged keys nothing; an empty bucket or filter ends at once.
// It reads far faster than a request per key.
func TestScanBucket(t *testing.T) {
	env := eventstest.Start(t)
	js := env.Bus(t).JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "scanned"})
	if err != nil {
		t.Fatal(err)
	}
	scan := func(filter string) map[string]string {
		t.Helper()
		got := map[string]string{}
		if err := events.ScanBucket(ctx, kv, filter, func(k string, v []byte) error {
			if _, dup := got[k]; dup {
				t.Fatalf("%s passed twice", k)
			}
			got[k] = string(v)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := scan(""); len(got) != 0 {
		t.Fatalf("empty bucket: %v", got)
	}
	const n = 3000
	for i := range n {
		if _, err := kv.Put(ctx, fmt.Sprintf("run.r%d", i), []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if _, err := kv.Put(ctx, fmt.Sprintf("run.r%d", i), []byte("v2")); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, fmt.Sprintf("confirm.c%d", i), []byte("c")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "run.r10"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "run.r11"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := scan("run.>")
	took := time.Since(start)
	if len(got) != n-2 {
		t.Fatalf("%d keys, want %d", len(got), n-2)
	}
	for k, v := range got {
		want := "v1"
		var i int
		if _, err := fmt.Sscanf(k, "run.r%d", &i); err != nil {
			t.Fatalf("key %s outside the filter", k)
		}
		if i < 10 {
			want = "v2"
		}
		if i == 10 || i == 11 {
			t.Fatalf("%s was removed and still passed", k)
		}
		if v != want {
			t.Fatalf("%s = %s, want %s", k, v, want)
		}
	}
	if all := scan(""); len(all) != n-2+10 {
		t.Fatalf("every key: %d, want %d", len(all), n-2+10)
	}
	if none := scan("nosuch.>"); len(none) != 0 {
		t.Fatalf("no key matches: %v", none)
	}
	// The same read a request per key, as listing and getting did.
	start = time.Now()
	lister, err := kv.ListKeysFiltered(ctx, "run.>")
	if err != nil {
		t.Fatal(err)
	}
	for k := range lister.Keys() {
		if _, err := kv.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	perKey := time.Since(start)
	t.Logf("%d keys: scan %v, list and get each %v", n-2, took, perKey)
	if took > perKey {
		t.Fatalf("the scan took %v, listing and getting each key %v", took, perKey)
	}
}

// TestScanBucketStopsEarlyWithoutLeaks: a scan that stops early (its
// function fails, its context ends) with many values still coming leaves
// no goroutine behind: nats.go's watcher hands values over while holding
// its lock, and one blocked on a full channel would keep its
// subscription's goroutine forever.
func TestScanBucketStopsEarlyWithoutLeaks(t *testing.T) {
	env := eventstest.Start(t)
	js := env.Bus(t).JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "scanstop"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if _, err := kv.Put(ctx, fmt.Sprintf("k.%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// Let the connection's and server's goroutines settle first.
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()
	stop := errors.New("enough")
	const scans = 10 // each would leave one goroutine behind
	for range scans {
		if err := events.ScanBucket(ctx, kv, "", func(string, []byte) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("scan: %v, want its function's error", err)
		}
	}
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		// A little slack for the server's own comings and goings.
		if n := runtime.NumGoroutine(); n > before+3 {
			return fmt.Errorf("%d goroutines, %d before %d scans", n, before, scans)
		}
		return nil
	})
}
