package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Projection turns events into KV state. Apply must be deterministic: it
// may use only the store and the event (its time, never the clock), so
// that `heed replay` rebuilds the same bucket from the log.
type Projection interface {
	// Name names the projection's durable consumer (proj-<name>).
	Name() string
	// Bucket is the KV bucket the projection owns.
	Bucket() string
	// Filters are the subjects it consumes.
	Filters() []string
	// Apply folds one event into the store.
	Apply(ctx context.Context, s Store, ev *Event) error
}

// Store is a projection's view of its bucket while applying one event.
type Store interface {
	// Get decodes the value at key into v and reports whether it exists.
	Get(ctx context.Context, key string, v any) (bool, error)
	// Put stores v (as JSON) at key.
	Put(ctx context.Context, key string, v any) error
	// Delete removes key.
	Delete(ctx context.Context, key string) error
}

// envelope is what a projection stores at each key: the value and the log
// sequence of the last event that wrote it. A redelivered event whose
// sequence is not newer than the key's is not applied again, so projections
// are idempotent under at-least-once delivery without any care in Apply.
type envelope struct {
	Seq     uint64          `json:"seq"`
	Deleted bool            `json:"deleted,omitempty"`
	Value   json.RawMessage `json:"value,omitempty"`
}

// kvStore applies one event (at seq) to a live bucket.
type kvStore struct {
	kv   jetstream.KeyValue
	seq  uint64
	seen map[string]kvSeen
}

type kvSeen struct {
	rev uint64
	seq uint64
}

func (s *kvStore) load(ctx context.Context, key string) (*envelope, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.seen[key] = kvSeen{}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	var env envelope
	if err := json.Unmarshal(e.Value(), &env); err != nil {
		return nil, fmt.Errorf("decode %s: %w", key, err)
	}
	s.seen[key] = kvSeen{rev: e.Revision(), seq: env.Seq}
	return &env, nil
}

func (s *kvStore) Get(ctx context.Context, key string, v any) (bool, error) {
	env, err := s.load(ctx, key)
	if err != nil || env == nil || env.Deleted {
		return false, err
	}
	return true, json.Unmarshal(env.Value, v)
}

func (s *kvStore) Put(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return s.write(ctx, key, envelope{Seq: s.seq, Value: b})
}

func (s *kvStore) Delete(ctx context.Context, key string) error {
	return s.write(ctx, key, envelope{Seq: s.seq, Deleted: true})
}

func (s *kvStore) write(ctx context.Context, key string, env envelope) error {
	seen, ok := s.seen[key]
	if !ok {
		if _, err := s.load(ctx, key); err != nil {
			return err
		}
		seen = s.seen[key]
	}
	if seen.seq >= env.Seq && seen.rev != 0 {
		return nil // this event was applied to this key before
	}
	b, _ := json.Marshal(env)
	var rev uint64
	var err error
	if seen.rev == 0 {
		rev, err = s.kv.Create(ctx, key, b)
	} else {
		rev, err = s.kv.Update(ctx, key, b, seen.rev)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err) // a concurrent writer: retry the event
	}
	s.seen[key] = kvSeen{rev: rev, seq: env.Seq}
	return nil
}

// memStore applies events to a map (replay).
type memStore struct {
	m   map[string]envelope
	seq uint64
}

func (s *memStore) Get(_ context.Context, key string, v any) (bool, error) {
	env, ok := s.m[key]
	if !ok || env.Deleted {
		return false, nil
	}
	return true, json.Unmarshal(env.Value, v)
}

func (s *memStore) Put(_ context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	s.m[key] = envelope{Seq: s.seq, Value: b}
	return nil
}

func (s *memStore) Delete(_ context.Context, key string) error {
	s.m[key] = envelope{Seq: s.seq, Deleted: true}
	return nil
}

// ProjectorName is the durable consumer name of a projection.
func ProjectorName(p Projection) string { return "proj-" + p.Name() }

// RunProjector keeps p's bucket up to date from the log: a durable
// consumer with one event in flight, so events apply in log order.
func RunProjector(ctx context.Context, bus *Bus, p Projection, log *slog.Logger) (*Consumer, error) {
	kv, err := bus.js.KeyValue(ctx, p.Bucket())
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("bucket %s: %v", p.Bucket(), err), Err: err}
	}
	return Consume(ctx, bus, ConsumerConfig{
		Name:          ProjectorName(p),
		Description:   "projection " + p.Name() + " into KV bucket " + p.Bucket(),
		Filters:       p.Filters(),
		ServerFilter:  serverFilter(p.Filters()),
		MaxAckPending: 1,
		Workers:       1,
		Logger:        log,
	}, func(ctx context.Context, d *Delivery) ([]Event, error) {
		s := &kvStore{kv: kv, seq: d.Seq, seen: make(map[string]kvSeen, 2)}
		return nil, p.Apply(ctx, s, d.Event)
	})
}

// ReplayReport says how a rebuilt projection compares with the live one.
type ReplayReport struct {
	Projection string
	Bucket     string   // the live bucket
	ReplayedTo string   // the fresh bucket holding the rebuild
	Events     int      // valid events applied
	Skipped    int      // messages the gate refuses (they are in the dead-letter stream)
	Keys       int      // keys in the rebuild
	Missing    []string // in the rebuild, not in the live bucket
	Extra      []string // in the live bucket, not in the rebuild
	Different  []string // in both, with different values
	LastSeq    uint64
}

// Identical reports whether the live bucket matches the rebuild.
func (r *ReplayReport) Identical() bool {
	return len(r.Missing) == 0 && len(r.Extra) == 0 && len(r.Different) == 0
}

// Replay rebuilds p from the log into a fresh bucket (<bucket>_replay,
// recreated) and compares it with the live bucket once the live projector
// has caught up with the same log position.
func Replay(ctx context.Context, bus *Bus, p Projection, topo Topology) (*ReplayReport, error) {
	rep := &ReplayReport{Projection: p.Name(), Bucket: p.Bucket(), ReplayedTo: p.Bucket() + "_replay"}
	mem := &memStore{m: make(map[string]envelope)}
	var after uint64
	apply := func(raw RawMsg) error {
		ev, err := bus.codec.DecodeStored(raw)
		if err != nil {
			rep.Skipped++
			return nil
		}
		mem.seq = raw.Seq
		if err := p.Apply(ctx, mem, ev); err != nil {
			return fmt.Errorf("apply seq %d (%s): %w", raw.Seq, ev.Type(), err)
		}
		rep.Events++
		return nil
	}
	live, err := bus.js.KeyValue(ctx, p.Bucket())
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("bucket %s: %v", p.Bucket(), err), Err: err}
	}
	// Catch up, wait for the live projector to reach the same point, and
	// go again if events arrived meanwhile.
	for round := 0; ; round++ {
		last, err := ReadLog(ctx, bus.js, EventStream, p.Filters(), after, apply)
		if err != nil {
			return nil, err
		}
		after = last
		if err := waitCaughtUp(ctx, bus.js, ProjectorName(p), last); err != nil {
			return nil, err
		}
		s, err := bus.js.Stream(ctx, EventStream)
		if err != nil {
			return nil, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		if info.State.LastSeq == last || round >= 5 {
			break
		}
	}
	rep.LastSeq = after
	// Write the rebuild to a fresh bucket.
	_ = bus.js.DeleteKeyValue(ctx, rep.ReplayedTo)
	if err := ProvisionBucket(ctx, bus.js, topo, BucketSpec{Name: rep.ReplayedTo, Description: "rebuild of " + p.Bucket() + " by heed replay"}); err != nil {
		return nil, err
	}
	fresh, err := bus.js.KeyValue(ctx, rep.ReplayedTo)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(mem.m))
	for k := range mem.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, _ := json.Marshal(mem.m[k])
		if _, err := fresh.Put(ctx, k, b); err != nil {
			return nil, fmt.Errorf("write rebuild %s: %w", k, err)
		}
	}
	rep.Keys = len(keys)
	// Compare.
	liveKeys, err := live.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("list %s: %w", p.Bucket(), err)
	}
	inLive := make(map[string]bool, len(liveKeys))
	for _, k := range liveKeys {
		inLive[k] = true
		want, ok := mem.m[k]
		if !ok {
			rep.Extra = append(rep.Extra, k)
			continue
		}
		e, err := live.Get(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", k, err)
		}
		var got envelope
		if err := json.Unmarshal(e.Value(), &got); err != nil || !sameEnvelope(got, want) {
			rep.Different = append(rep.Different, k)
		}
	}
	for _, k := range keys {
		if !inLive[k] {
			rep.Missing = append(rep.Missing, k)
		}
	}
	sort.Strings(rep.Extra)
	sort.Strings(rep.Different)
	return rep, nil
}

func sameEnvelope(a, b envelope) bool {
	if a.Seq != b.Seq || a.Deleted != b.Deleted {
		return false
	}
	return jsonEqual(a.Value, b.Value)
}

func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}

// waitCaughtUp waits until the durable consumer name has nothing pending
// or unacknowledged at or before seq.
func waitCaughtUp(ctx context.Context, js jetstream.JetStream, name string, seq uint64) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := js.Consumer(ctx, EventStream, name)
		if err != nil {
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("projector %s is not running (start heed first): %v", name, err), Err: err}
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if ci.AckFloor.Stream >= seq || (ci.NumPending == 0 && ci.NumAckPending == 0) {
			return nil
		}
		if time.Now().After(deadline) {
			return Errorf(CodeUnavailable, "projector %s has not caught up with sequence %d (ack floor %d, %d pending)", name, seq, ci.AckFloor.Stream, ci.NumPending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serverFilter is "heed.>" for a projection of every event (see
// ConsumerConfig.ServerFilter), else none: a projection of a few types
// would be handed every other event one at a time (MaxAckPending 1).
func serverFilter(filters []string) string {
	if slices.Equal(filters, EventSubjects()) {
		return Prefix + ".>"
	}
	return ""
}
