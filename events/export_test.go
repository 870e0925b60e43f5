package events

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReplayBeforeApply runs a function between Replay's comparison and its
// apply, so a test can write to the bucket in between.
type ReplayBeforeApply func()

func (f ReplayBeforeApply) replayOption(o *replayOpts) { o.beforeApply = f }

// MuteProgress stops a delivery held after it from reporting progress, as
// a progress report lost in a failover would: the server redelivers it
// after the ack wait while this process still holds it.
func MuteProgress(d *Delivery) {
	d.mu.Lock()
	d.mute = true
	d.mu.Unlock()
}

// WriteBatch writes msgs as one fast batch, as PublishAll does, and says
// how many the stream stored.
func WriteBatch(ctx context.Context, b *Bus, msgs []*nats.Msg) (int, error) {
	return b.batch.write(ctx, msgs)
}

// ProjCacheBehind sets how far behind the log a projector must be to use
// its cache (0: always) until the test ends.
func ProjCacheBehind(t interface{ Cleanup(func()) }, n uint64) {
	old := projCacheBehind.Swap(n)
	t.Cleanup(func() { projCacheBehind.Store(old) })
}

// LeaderGet is leaderGet: a key's value and revision, from the stream API
// (direct false) or a direct get (direct true).
func LeaderGet(ctx context.Context, js jetstream.JetStream, bucket, key string, direct bool) ([]byte, uint64, error) {
	if !direct {
		return leaderGet(ctx, js, bucket, key, nil)
	}
	r := &singleReplica{js: js, stream: "KV_" + bucket}
	if !r.direct(ctx) {
		return nil, 0, fmt.Errorf("bucket %s is not read with direct gets", bucket)
	}
	return leaderGet(ctx, js, bucket, key, r)
}
