package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A projector folds one event at a time and is, by design, the only
// writer of its bucket: what it wrote last is what a read would give,
// unless someone else wrote since (a second process running the same
// projector, `heed replay --apply`, a marker the server placed). So it
// keeps what it wrote and reads it back from memory, and guards every
// write by the bucket stream's last sequence: a write that finds the
// stream moved on by anyone else is refused, the cache is dropped, and
// the event is folded again from the bucket. Each cached read saves a
// direct get (a request to the stream's leader) per key per event.
//
// The guard must cover the reads, not only the writes: the reads that
// missed the cache are made after the sequence the first write expects
// (projCache.begin takes it before any read), so "the stream has not moved
// since" also means "what was read is what is there". A fold that read
// from the cache and wrote nothing asks the stream whether anything came
// after that sequence before its event counts as folded (unchanged).

// projCacheKeys and projCacheBytes bound what one projector keeps (the
// oldest forgotten first): a run's or an escalation's events come close
// together in the log, so recent keys are the ones read again.
const (
	projCacheKeys  = 512
	projCacheBytes = 1 << 20
)

// projCacheBehind: the cache is used only while the projector is this
// many events or more behind the log (a burst, a catch-up), where it
// folds ~15% cheaper in CPU. Kept up to date event by event it made other
// services' latency worse on 2 cores (a single approval's round trip p99
// +1.5-2 ms, an escalation's reply p99 +5 ms, BENCHMARKS.md): a projector
// that waits on its reads leaves the CPU to the critical path.
var projCacheBehind atomic.Uint64

func init() { projCacheBehind.Store(64) }

// projCacheIdle: a projector that folded nothing for this long reads its
// bucket again before trusting its cache (whoever else wrote meanwhile,
// e.g. `heed replay --apply`, is then seen by the reads, not only by the
// next write's guard).
const projCacheIdle = time.Second

// projCacheOff is how long a projector folds without its cache after a
// write found that someone else wrote its bucket: two processes running
// the same projector take turns with its events, and each turn would find
// the other's writes.
const projCacheOff = time.Minute

// errProjCacheStale: the bucket moved on since the cache's last sequence;
// nothing of the write was stored.
var errProjCacheStale = errors.New("projection cache: the bucket changed")

type projCache struct {
	js     jetstream.JetStream
	bucket string
	// last is the bucket stream's last sequence as of the cache's last
	// look or write, if known (begin reads it).
	last     uint64
	known    bool
	keys     map[string]cachedKey
	ring     []string // insertion order, oldest at next once full
	next     int
	bytes    int // of the cached values
	offUntil time.Time
	lastAt   time.Time // when the last event began
	now      func() time.Time
	// replica says whether the bucket's direct gets are its leader's
	// (set by RunProjector; nil: ask the leader through the stream API).
	replica *singleReplica
}

type cachedKey struct {
	rev uint64 // 0: the key is absent (deleted by this projector)
	env envelope
}

// newProjCache is nil (no cache) on a connection with another API prefix
// (a JetStream domain): its KV subjects are not the plain $KV.<bucket>.<key>
// the cache writes.
func newProjCache(js jetstream.JetStream, bucket string) *projCache {
	if apiPrefix(js) != jetstream.DefaultAPIPrefix {
		return nil
	}
	return &projCache{js: js, bucket: bucket, keys: map[string]cachedKey{}, now: time.Now}
}

// begin readies the cache for the next event; afterPrevious says no other
// process folded an event of this projector since the last one folded
// here (Delivery.afterPrevious), behind how many events are still to
// fold after it. False means fold it without the cache.
func (c *projCache) begin(ctx context.Context, afterPrevious bool, behind uint64) bool {
	if c == nil {
		return false
	}
	now := c.now()
	switch {
	case behind < projCacheBehind.Load():
		// Keeping up: folded as it comes, reading each key, as the
		// cache would cost latency elsewhere (see projCacheBehind).
		if c.known {
			c.drop(false)
		}
		return false
	case !afterPrevious && c.known:
		c.drop(true) // another process folded events in between
	case now.Sub(c.lastAt) > projCacheIdle:
		c.drop(false)
	}
	c.lastAt = now
	if now.Before(c.offUntil) {
		return false
	}
	if c.known {
		return true
	}
	s, err := c.js.Stream(ctx, "KV_"+c.bucket)
	if err != nil {
		return false
	}
	c.last, c.known = s.CachedInfo().State.LastSeq, true
	return true
}

// drop forgets everything, and turns the cache off for a while when
// someone else is writing the bucket.
func (c *projCache) drop(otherWriter bool) {
	if c == nil {
		return
	}
	clear(c.keys)
	clear(c.ring) // the keys' strings go with the values
	c.ring, c.next, c.bytes, c.last, c.known = c.ring[:0], 0, 0, 0, false
	if otherWriter {
		c.offUntil = c.now().Add(projCacheOff)
	}
}

func (c *projCache) get(key string) (cachedKey, bool) {
	k, ok := c.keys[key]
	return k, ok
}

func (c *projCache) put(key string, k cachedKey) {
	if old, ok := c.keys[key]; ok {
		c.bytes -= len(old.env.Value)
	} else {
		if len(c.ring) < projCacheKeys {
			c.ring = append(c.ring, key)
		} else {
			c.forget(c.ring[c.next])
			c.ring[c.next] = key
			c.next = (c.next + 1) % projCacheKeys
		}
	}
	if len(k.env.Value) > projCacheBytes/4 {
		delete(c.keys, key) // a large value is read again instead (its ring slot stays, harmlessly)
		return
	}
	c.keys[key] = k
	c.bytes += len(k.env.Value)
	for c.bytes > projCacheBytes {
		c.forget(c.ring[c.next])
		c.next = (c.next + 1) % len(c.ring)
	}
}

func (c *projCache) forget(key string) {
	if old, ok := c.keys[key]; ok {
		c.bytes -= len(old.env.Value)
		delete(c.keys, key)
	}
}

// unchanged reports whether the bucket holds no message after the cache's
// last sequence: a fold that read from the cache and wrote nothing has no
// write whose guard would have told. One request to the stream's leader
// (the first message after it, if any): a direct get when the bucket has
// one replica (the stream API's message get also costs a JSON request, a
// base64 reply and an API advisory, and a projector behind the log makes
// one for every event it folds without writing), else the stream API.
func (c *projCache) unchanged(ctx context.Context) (bool, error) {
	stream, filter := "KV_"+c.bucket, "$KV."+c.bucket+".>"
	if c.replica.direct(ctx) {
		// Not a batch: the server counts nothing.
		m, err := directGet(ctx, c.js, stream, struct {
			Seq  uint64 `json:"seq"`
			Next string `json:"next_by_subj"`
		}{c.last + 1, filter})
		if err != nil {
			return false, err
		}
		if m == nil {
			return true, nil
		}
		if m.Header.Get(jetstream.StreamHeader) == stream {
			return false, nil
		}
		c.replica.foreign = true // a mirror answered (mirror_direct): ask the leader
	}
	msg, err := leaderMsgGet(ctx, c.js, stream, struct {
		Seq  uint64 `json:"seq"`
		Next string `json:"next_by_subj"`
	}{c.last + 1, filter})
	return msg == nil && err == nil, err
}

// publish writes m to the bucket guarded by the cache's last sequence and
// records the new one.
func (c *projCache) publish(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (uint64, error) {
	ack, err := c.js.PublishMsg(ctx, m, append(opts, jetstream.WithExpectLastSequence(c.last))...)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			c.drop(true)
			return 0, fmt.Errorf("%s: %w", m.Subject, errProjCacheStale)
		}
		c.drop(false) // not known whether it was stored
		return 0, err
	}
	c.last = ack.Sequence
	return ack.Sequence, nil
}

// kvSubject is the subject of key in bucket, as nats.go's KeyValue writes
// it; keys it would refuse are refused here too.
func kvSubject(bucket, key string) (string, error) {
	if !validKVKey(key) {
		return "", fmt.Errorf("key %q: %w", key, jetstream.ErrInvalidKey)
	}
	return "$KV." + bucket + "." + key, nil
}

// validKVKey is nats.go's rule for keys: [-/_=.a-zA-Z0-9]+, not starting
// or ending with a dot, no empty token.
func validKVKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '/', c == '_', c == '=', c == '.':
		default:
			return false
		}
	}
	return true
}
