package events

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketCache is an in-memory copy of a projection bucket, kept current by
// a KV watcher: services read learned state in microseconds without a round
// trip per decision. Values are the projection's envelope values.
type BucketCache struct {
	mu    sync.RWMutex
	m     map[string]json.RawMessage
	ready chan struct{}
	w     jetstream.KeyWatcher
}

// WatchBucket starts caching bucket, or only its keys that match one of
// keys (KV key filters: "*" is every key of one token) when some are
// given. It returns at once; Ready is closed once the initial values are
// loaded.
func WatchBucket(ctx context.Context, js jetstream.JetStream, bucket string, keys ...string) (*BucketCache, error) {
	kv, err := BindBucket(ctx, js, bucket)
	if err != nil {
		return nil, err
	}
	var w jetstream.KeyWatcher
	err = WhileUnavailable(ctx, func() (err error) {
		if len(keys) == 0 {
			w, err = kv.WatchAll(ctx)
		} else {
			// A copy each try: nats.go rewrites the slice it is given
			// into subjects, which a second try would refuse as keys.
			w, err = kv.WatchFiltered(ctx, slices.Clone(keys))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	c := &BucketCache{m: map[string]json.RawMessage{}, ready: make(chan struct{}), w: w}
	go func() {
		readyOnce := sync.Once{}
		for e := range w.Updates() {
			if e == nil {
				readyOnce.Do(func() { close(c.ready) })
				continue
			}
			c.mu.Lock()
			if e.Operation() != jetstream.KeyValuePut {
				delete(c.m, e.Key())
			} else {
				var env envelope
				if json.Unmarshal(e.Value(), &env) == nil && !env.Deleted {
					c.m[e.Key()] = env.Value
				} else {
					delete(c.m, e.Key())
				}
			}
			c.mu.Unlock()
		}
		readyOnce.Do(func() { close(c.ready) })
	}()
	return c, nil
}

// Ready is closed when the initial values are loaded.
func (c *BucketCache) Ready() <-chan struct{} { return c.ready }

// Get decodes the value at key into v.
func (c *BucketCache) Get(key string, v any) bool {
	c.mu.RLock()
	b, ok := c.m[key]
	c.mu.RUnlock()
	return ok && json.Unmarshal(b, v) == nil
}

// Each calls f for every key (order unspecified) until f returns false.
func (c *BucketCache) Each(f func(key string, value json.RawMessage) bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for k, v := range c.m {
		if !f(k, v) {
			return
		}
	}
}

// Stop stops watching.
func (c *BucketCache) Stop() { _ = c.w.Stop() }

// ScanBucket calls fn with the current value of every key of kv that
// matches filter (a KV key filter such as "run.>"; "" for every key), in
// key order of the bucket's stream, through one watcher: an ordered
// consumer that delivers the last value of each key, deletes left out.
// Listing the keys and reading each made a request per key (10,000 runs
// in the index: 10,000 round trips). It returns once every value present
// when it began has been passed, or with fn's error.
func ScanBucket(ctx context.Context, kv jetstream.KeyValue, filter string, fn func(key string, value []byte) error) error {
	var w jetstream.KeyWatcher
	var err error
	if filter == "" {
		w, err = kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	} else {
		w, err = kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	}
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("scan %s: %v", kv.Bucket(), err), Err: err}
	}
	defer func() {
		_ = w.Stop()
		// nats.go's watcher hands values over while holding its lock: one
		// blocked on a full channel after an early return would keep its
		// subscription's goroutine forever. Drained, the channel closes.
		go func() {
			for range w.Updates() {
			}
		}()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("scan %s: the watch ended before its values were read", kv.Bucket())}
			}
			if e == nil {
				return nil // every value present at the start was passed
			}
			if err := fn(e.Key(), e.Value()); err != nil {
				return err
			}
		}
	}
}
