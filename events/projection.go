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
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
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
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	seq  uint64
	seen map[string]kvSeen
	// cache, when set, holds what this projector wrote and read lately;
	// every write is guarded by the bucket's last sequence (projcache.go).
	cache *projCache
	// fromCache: a read came from the cache; wrote: a guarded write was
	// stored (it vouches for the reads before it).
	fromCache, wrote bool
	// replica says whether the bucket has one replica, so that a direct
	// get is answered by its leader (leaderGet); nil: ask the leader.
	replica *singleReplica
}

type kvSeen struct {
	rev uint64
	seq uint64
}

func (s *kvStore) load(ctx context.Context, key string) (*envelope, error) {
	if s.cache != nil {
		if k, ok := s.cache.get(key); ok {
			s.fromCache = true
			s.seen[key] = kvSeen{rev: k.rev, seq: k.env.Seq}
			if k.rev == 0 {
				return nil, nil
			}
			env := k.env
			return &env, nil
		}
	}
	value, rev, err := leaderGet(ctx, s.js, s.kv.Bucket(), key, s.replica)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if rev == 0 {
		s.seen[key] = kvSeen{}
		if s.cache != nil {
			s.cache.put(key, cachedKey{})
		}
		return nil, nil
	}
	var env envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return nil, fmt.Errorf("decode %s: %w", key, err)
	}
	s.seen[key] = kvSeen{rev: rev, seq: env.Seq}
	if s.cache != nil {
		s.cache.put(key, cachedKey{rev: rev, env: env})
	}
	return &env, nil
}

// BucketLeaderGet reads a key's last value and revision from the bucket
// stream's leader (the stream API's message get: never a replica behind
// it): nil and 0 when there is none (never written, deleted, purged or
// removed by its TTL). For reads that decide who owns something (a
// lease).
func BucketLeaderGet(ctx context.Context, js jetstream.JetStream, bucket, key string) ([]byte, uint64, error) {
	return leaderGet(ctx, js, bucket, key, nil)
}

// leaderGet reads a key's last value from the bucket stream's leader: rev
// 0 when there is none (never written, deleted or purged). A KV get is a
// direct get, which any replica of an R3 bucket may answer, a replica that
// has not applied the last write yet among them; a projection that reads
// one key and writes another (a decision's counter from a confirmation's
// state) would then count an event twice, the guard on the key it writes
// being right. The leader has every write it acknowledged.
//
// With direct (the bucket has one replica: its only server is its
// leader) it is a direct get after all: the stream API's message get goes
// through the JetStream API (a service import, a JSON reply with the
// message in base64) and cost the server and the projector ~3 times the
// allocation, most of a projector's reads while it keeps up.
func leaderGet(ctx context.Context, js jetstream.JetStream, bucket, key string, replica *singleReplica) ([]byte, uint64, error) {
	if replica.direct(ctx) {
		m, err := lastOfMsg(ctx, js, "KV_"+bucket, "$KV."+bucket+"."+key)
		if err != nil {
			return nil, 0, err
		}
		if m == nil {
			return nil, 0, nil
		}
		if m.Header.Get(jetstream.StreamHeader) == "KV_"+bucket {
			raw, err := directRaw(m)
			if err != nil {
				return nil, 0, err
			}
			switch raw.Header.Get("KV-Operation") {
			case "DEL", "PURGE":
				return nil, 0, nil
			}
			if raw.Header.Get("Nats-Marker-Reason") != "" {
				return nil, 0, nil // a TTL's or limit's removal marker
			}
			return raw.Data, raw.Seq, nil
		}
		// Another stream answered: a mirror serving the bucket's direct
		// gets (mirror_direct), which may be behind. Never again.
		replica.foreign = true
	}
	msg, err := leaderMsgGet(ctx, js, "KV_"+bucket, struct {
		LastBy string `json:"last_by_subj"`
	}{"$KV." + bucket + "." + key})
	if err != nil || msg == nil {
		return nil, 0, err
	}
	if len(msg.Header) > 0 {
		hdr, err := nats.DecodeHeadersMsg(msg.Header)
		if err == nil {
			switch hdr.Get("KV-Operation") {
			case "DEL", "PURGE":
				return nil, 0, nil
			}
			if hdr.Get("Nats-Marker-Reason") != "" {
				return nil, 0, nil // a TTL's or limit's removal marker
			}
		}
	}
	return msg.Data, msg.Seq, nil
}

// storedMsg is a message as the stream API's message get returns it.
type storedMsg struct {
	Seq    uint64 `json:"seq"`
	Header []byte `json:"hdrs"`
	Data   []byte `json:"data"`
}

// leaderMsgGet asks stream's leader for the message req names (the
// stream API's message get, not a direct get that any replica may
// answer): nil when there is none.
func leaderMsgGet(ctx context.Context, js jetstream.JetStream, stream string, req any) (*storedMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m, err := js.Conn().RequestWithContext(ctx, apiPrefix(js)+"STREAM.MSG.GET."+stream, b)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *storedMsg          `json:"message"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("message get: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.Code == 404 {
			return nil, nil
		}
		return nil, resp.Error
	}
	return resp.Message, nil
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

// Delete removes key for real: a purge whose marker expires after
// DeleteMarkerTTL (watchers see the removal meanwhile), so a deleted key
// leaves nothing behind. A redelivered event that deleted a key finds it
// absent, as the replay's rebuild does; deterministic Apply functions treat
// an absent key the same either way.
func (s *kvStore) Delete(ctx context.Context, key string) error {
	seen, ok := s.seen[key]
	if !ok {
		if _, err := s.load(ctx, key); err != nil {
			return err
		}
		seen = s.seen[key]
	}
	if seen.rev == 0 {
		return nil // not there: never written, or removed already
	}
	if s.cache != nil {
		// A purge of the key's history (nats.go's kv.Purge) whose marker
		// expires, guarded by the bucket's last sequence.
		subj, err := kvSubject(s.kv.Bucket(), key)
		if err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		m := nats.NewMsg(subj)
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		if _, err := s.cache.publish(ctx, m, jetstream.WithMsgTTL(DeleteMarkerTTL)); err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		s.seen[key] = kvSeen{}
		s.cache.put(key, cachedKey{})
		s.wrote = true
		return nil
	}
	if err := s.kv.Purge(ctx, key, jetstream.LastRevision(seen.rev), jetstream.PurgeTTL(DeleteMarkerTTL)); err != nil {
		return fmt.Errorf("delete %s: %w", key, err) // a concurrent writer: retry the event
	}
	s.seen[key] = kvSeen{}
	return nil
}

// DeleteMarkerTTL is how long the marker of a deleted projection key stays
// in its bucket (so that watchers, and readers that had the key, see it go)
// before the server removes it.
const DeleteMarkerTTL = time.Hour

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
	if s.cache != nil {
		subj, err := kvSubject(s.kv.Bucket(), key)
		if err != nil {
			return fmt.Errorf("write %s: %w", key, err)
		}
		m := nats.NewMsg(subj)
		m.Data = b
		rev, err := s.cache.publish(ctx, m)
		if err != nil {
			return fmt.Errorf("write %s: %w", key, err)
		}
		s.seen[key] = kvSeen{rev: rev, seq: env.Seq}
		s.cache.put(key, cachedKey{rev: rev, env: env})
		s.wrote = true
		return nil
	}
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
	delete(s.m, key)
	return nil
}

func (s *memStore) keys() []string {
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ProjectorName is the durable consumer name of a projection.
func ProjectorName(p Projection) string { return "proj-" + p.Name() }

// RunProjector keeps p's bucket up to date from the log: a durable
// consumer with one event in flight, so events apply in log order.
func RunProjector(ctx context.Context, bus *Bus, p Projection, log *slog.Logger) (*Consumer, error) {
	kv, err := BindBucket(ctx, bus.js, p.Bucket())
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("bucket %s: %v", p.Bucket(), err), Err: err}
	}
	cache := newProjCache(bus.js, p.Bucket()) // one event at a time: the handler alone uses it
	replica := &singleReplica{js: bus.js, stream: "KV_" + p.Bucket()}
	if cache != nil {
		cache.replica = replica
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
		s := &kvStore{js: bus.js, kv: kv, seq: d.Seq, seen: make(map[string]kvSeen, 2), replica: replica}
		if cache.begin(ctx, d.afterPrevious, d.behind) {
			s.cache = cache
		}
		err := p.Apply(ctx, s, d.Event)
		if err == nil && s.fromCache && !s.wrote {
			// It read from the cache and wrote nothing: no guard has
			// vouched for what it read.
			if same, verr := cache.unchanged(ctx); verr != nil || !same {
				cache.drop(verr == nil)
				err = errProjCacheStale
			}
		}
		if errors.Is(err, errProjCacheStale) {
			// Someone else wrote the bucket: fold the event again from
			// what it holds (what was written of it is skipped by its
			// sequence, as for a redelivery).
			s = &kvStore{js: bus.js, kv: kv, seq: d.Seq, seen: make(map[string]kvSeen, 2), replica: replica}
			err = p.Apply(ctx, s, d.Event)
		}
		if err != nil {
			cache.drop(false)
		}
		return nil, err
	})
}

// singleReplica says whether a bucket's stream has one replica on one
// server (and allows direct gets), so that its direct gets are answered by
// its leader. It is looked up again every replicaLookEvery: an operator
// may scale a bucket up or move it while heed runs (nats stream edit
// --replicas 3), after which reads go to the leader again. Unknown counts
// as replicated; a direct get answered by another stream (a mirror with
// mirror_direct) turns direct gets off for good. Used by one goroutine (a
// projector's handler).
type singleReplica struct {
	js      jetstream.JetStream
	stream  string
	single  bool
	foreign bool
	at      time.Time
}

const replicaLookEvery = 10 * time.Second

// direct reports whether to read with a direct get; false for nil.
func (r *singleReplica) direct(ctx context.Context) bool {
	if r == nil || r.foreign {
		return false
	}
	if time.Since(r.at) < replicaLookEvery {
		return r.single
	}
	r.at = time.Now()
	r.single = false
	if s, err := r.js.Stream(ctx, r.stream); err == nil {
		info := s.CachedInfo()
		r.single = info.Config.Replicas <= 1 && info.Config.AllowDirect && (info.Cluster == nil || len(info.Cluster.Replicas) == 0)
	}
	return r.single
}

// ReplayReport says how a rebuilt projection compares with the live one.
type ReplayReport struct {
	Projection string   `json:"projection"`
	Bucket     string   `json:"bucket"`                // the live bucket
	ReplayedTo string   `json:"replayed_to,omitempty"` // the bucket holding the rebuild, when kept (ReplayKeep)
	Events     int      `json:"events"`                // valid events applied
	Skipped    int      `json:"skipped"`               // messages the gate or the projection refuses (they are in the dead-letter stream)
	Keys       int      `json:"keys"`                  // keys in the rebuild
	Missing    []string `json:"missing,omitempty"`     // in the rebuild, not in the live bucket
	Extra      []string `json:"extra,omitempty"`       // in the live bucket, not in the rebuild
	Different  []string `json:"different,omitempty"`   // in both, with different values
	LastSeq    uint64   `json:"last_seq"`
	// Applied is how many live keys ReplayApply wrote or removed; after
	// it the live bucket matches the rebuild (Missing, Extra and
	// Different say what differed before).
	Applied int `json:"applied,omitempty"`
	// Attempts is how many times the apply was tried: a write of the live
	// projector between the comparison and the apply makes it start again.
	Attempts int `json:"attempts,omitempty"`
}

// Identical reports whether the live bucket matched the rebuild.
func (r *ReplayReport) Identical() bool {
	return len(r.Missing) == 0 && len(r.Extra) == 0 && len(r.Different) == 0
}

// ReplayOption changes what Replay does.
type ReplayOption interface{ replayOption(*replayOpts) }

type replayOpts struct {
	keep, apply bool
	attempts    int
	beforeApply func() // tests: runs between the comparison and the apply
}

// ReplayKeep writes the rebuild to <bucket>_replay and leaves it there for
// inspection. Without it no scratch bucket remains after Replay (one left
// by an earlier replay is removed).
type ReplayKeep struct{}

func (ReplayKeep) replayOption(o *replayOpts) { o.keep = true }

// ReplayApply swaps the rebuild in for the live keys that differ, in one
// atomic batch on the bucket's stream, guarded by the stream's last
// sequence: if the live projector (which keeps running) writes anything
// between the comparison and the apply, the batch fails as a whole and
// Replay catches up, compares and tries again. A reader sees the old state
// or the new one, never a mix (up to MaxAtomicBatch keys; more are applied
// in guarded batches of that size, each atomic).
type ReplayApply struct {
	Attempts int // how often to try before giving up; 0 is 10
}

func (a ReplayApply) replayOption(o *replayOpts) {
	o.apply, o.attempts = true, a.Attempts
	if o.attempts <= 0 {
		o.attempts = 10
	}
}

// MaxAtomicBatch is nats-server's default limit on the messages of one
// atomic batch (jetstream.max_batch_size).
const MaxAtomicBatch = 1000

// Replay rebuilds p from the log in memory and compares it with the live
// bucket once the live projector has caught up with the same log position.
// With ReplayApply it then makes the live bucket equal to the rebuild; with
// ReplayKeep it writes the rebuild to <bucket>_replay.
//
// A replay that JetStream cannot serve for a moment (a cluster electing a
// leader answers "no responders" or times out) starts again from the
// beginning, for up to ClusterPatience: it is a read, and a rebuild half
// read is thrown away.
func Replay(ctx context.Context, bus *Bus, p Projection, topo Topology, opts ...ReplayOption) (*ReplayReport, error) {
	var rep *ReplayReport
	err := WhileUnavailable(ctx, func() error {
		var err error
		rep, err = replayOnce(ctx, bus, p, topo, opts...)
		return err
	})
	return rep, err
}

func replayOnce(ctx context.Context, bus *Bus, p Projection, topo Topology, opts ...ReplayOption) (*ReplayReport, error) {
	var o replayOpts
	for _, opt := range opts {
		opt.replayOption(&o)
	}
	rep := &ReplayReport{Projection: p.Name(), Bucket: p.Bucket()}
	scratch := p.Bucket() + "_replay"
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
			if CodeOf(err) == CodePoison {
				// The live projector dead-lettered it: skipped by both.
				rep.Skipped++
				return nil
			}
			return fmt.Errorf("apply seq %d (%s): %w", raw.Seq, ev.Type(), err)
		}
		rep.Events++
		return nil
	}
	live, err := bus.js.KeyValue(ctx, p.Bucket())
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("bucket %s: %v", p.Bucket(), err), Err: err}
	}
	var cmp *bucketDiff
	for attempt := 1; ; attempt++ {
		// Catch up, wait for the live projector to reach the same point, and
		// go again if events arrived meanwhile. (Each attempt goes on from
		// where the last one stopped.)
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
		cmp, err = compareLive(ctx, bus.js, live, mem)
		if err != nil {
			return nil, err
		}
		if !o.apply || cmp.identical() {
			break
		}
		rep.Attempts = attempt
		if o.beforeApply != nil {
			o.beforeApply()
		}
		n, err := applyDiff(ctx, bus.js, p.Bucket(), cmp, mem)
		rep.Applied += n
		if err == nil {
			break
		}
		if !errors.Is(err, errBucketMoved) || attempt >= o.attempts {
			return nil, &Error{Code: CodeConflict, Message: fmt.Sprintf("apply the rebuild of %s (attempt %d): %v", p.Bucket(), attempt, err), Err: err}
		}
		// The live projector wrote meanwhile: compare again from the top.
	}
	rep.Missing, rep.Extra, rep.Different = cmp.missing, cmp.extra, cmp.different
	keys := mem.keys()
	rep.Keys = len(keys)
	// The scratch bucket: written only when asked for; one left behind by
	// an earlier replay is removed.
	if err := bus.js.DeleteKeyValue(ctx, scratch); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("remove %s: %w", scratch, err)
	}
	if o.keep {
		rep.ReplayedTo = scratch
		if err := ProvisionBucket(ctx, bus.js, topo, BucketSpec{Name: scratch, Description: "rebuild of " + p.Bucket() + " by heed replay --keep"}); err != nil {
			return nil, err
		}
		fresh, err := bus.js.KeyValue(ctx, scratch)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			b, _ := json.Marshal(mem.m[k])
			if _, err := fresh.Put(ctx, k, b); err != nil {
				return nil, fmt.Errorf("write rebuild %s: %w", k, err)
			}
		}
	}
	return rep, nil
}

// bucketDiff is a live bucket compared with a rebuild, at the bucket
// stream's sequence seq (nothing was written to the bucket while it was
// read).
type bucketDiff struct {
	seq                       uint64
	missing, extra, different []string
}

func (d *bucketDiff) identical() bool {
	return len(d.missing) == 0 && len(d.extra) == 0 && len(d.different) == 0
}

// errBucketMoved: the live bucket was written while it was compared or
// before the apply's batch was stored.
var errBucketMoved = errors.New("the live bucket changed meanwhile")

// compareLive compares the live bucket with the rebuild, reading until it
// gets a reading no write interleaved with.
func compareLive(ctx context.Context, js jetstream.JetStream, live jetstream.KeyValue, mem *memStore) (*bucketDiff, error) {
	for try := 0; ; try++ {
		before, err := kvLastSeq(ctx, js, live.Bucket())
		if err != nil {
			return nil, err
		}
		d := &bucketDiff{seq: before}
		liveKeys, err := live.Keys(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, fmt.Errorf("list %s: %w", live.Bucket(), err)
		}
		inLive := make(map[string]bool, len(liveKeys))
		for _, k := range liveKeys {
			inLive[k] = true
			want, ok := mem.m[k]
			if !ok {
				d.extra = append(d.extra, k)
				continue
			}
			e, err := live.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				inLive[k] = false // removed since it was listed: the reading is redone below
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("get %s: %w", k, err)
			}
			var got envelope
			if err := json.Unmarshal(e.Value(), &got); err != nil || !sameEnvelope(got, want) {
				d.different = append(d.different, k)
			}
		}
		for _, k := range mem.keys() {
			if !inLive[k] {
				d.missing = append(d.missing, k)
			}
		}
		sort.Strings(d.extra)
		sort.Strings(d.different)
		after, err := kvLastSeq(ctx, js, live.Bucket())
		if err != nil {
			return nil, err
		}
		if after == before || try >= 20 {
			return d, nil
		}
	}
}

// kvLastSeq is the last sequence of a bucket's stream.
func kvLastSeq(ctx context.Context, js jetstream.JetStream, bucket string) (uint64, error) {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return 0, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	return info.State.LastSeq, nil
}

// applyDiff writes the rebuilt value of every missing and different key and
// purges every extra one, in atomic batches: the first is guarded by the
// sequence the comparison was made at, each next one by the previous
// batch's. It returns how many keys it changed.
func applyDiff(ctx context.Context, js jetstream.JetStream, bucket string, d *bucketDiff, mem *memStore) (int, error) {
	if err := allowAtomic(ctx, js, bucket); err != nil {
		return 0, err
	}
	var msgs []*nats.Msg
	for _, k := range append(append([]string(nil), d.missing...), d.different...) {
		b, _ := json.Marshal(mem.m[k])
		msgs = append(msgs, &nats.Msg{Subject: "$KV." + bucket + "." + k, Data: b, Header: nats.Header{}})
	}
	for _, k := range d.extra {
		m := &nats.Msg{Subject: "$KV." + bucket + "." + k, Header: nats.Header{}}
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		m.Header.Set(jetstream.MsgTTLHeader, DeleteMarkerTTL.String())
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].Subject < msgs[j].Subject })
	seq, done := d.seq, 0
	for len(msgs) > 0 {
		chunk := msgs[:min(len(msgs), MaxAtomicBatch)]
		msgs = msgs[len(chunk):]
		bp, err := jetstreamext.NewBatchPublisher(js)
		if err != nil {
			return done, err
		}
		for i, m := range chunk {
			var opts []jetstreamext.BatchMsgOpt
			if i == 0 {
				opts = append(opts, jetstreamext.WithBatchExpectLastSequence(seq))
			}
			if i == len(chunk)-1 {
				ack, err := bp.CommitMsg(ctx, m, opts...)
				if err != nil {
					return done, batchErr(err)
				}
				seq = ack.Sequence
				break
			}
			if err := bp.AddMsg(m, opts...); err != nil {
				_ = bp.Discard()
				return done, batchErr(err)
			}
		}
		done += len(chunk)
	}
	return done, nil
}

// batchErr marks a failed expectation of the last sequence as the bucket
// having moved on.
func batchErr(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %v", errBucketMoved, err)
	}
	if strings.Contains(err.Error(), "last sequence mismatch") || strings.Contains(err.Error(), "wrong last sequence") {
		return fmt.Errorf("%w: %v", errBucketMoved, err)
	}
	return err
}

// allowAtomic turns on atomic batch publishing on a bucket's stream (the
// KV API does not set it; provisioning may reset it).
func allowAtomic(ctx context.Context, js jetstream.JetStream, bucket string) error {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return err
	}
	cfg := s.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return nil
	}
	cfg.AllowAtomicPublish = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("allow atomic batches on %s: %w", bucket, err)
	}
	return nil
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
