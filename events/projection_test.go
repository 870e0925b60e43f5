package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// countProjection counts run events per aggregate, and remembers the type
// of the last one: a read-modify-write, the kind of Apply that doubles
// counts if an event is applied twice.
type countProjection struct{ bucket string }

type runCount struct {
	Events int    `json:"events"`
	Last   string `json:"last"`
	At     string `json:"at"`
}

func (p countProjection) Name() string      { return "counts" }
func (p countProjection) Bucket() string    { return p.bucket }
func (p countProjection) Filters() []string { return []string{"heed.run.>"} }
func (p countProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	var c runCount
	if _, err := s.Get(ctx, ev.Subject(), &c); err != nil {
		return err
	}
	c.Events++
	c.Last = ev.Type()
	c.At = ev.Time().UTC().Format(time.RFC3339Nano)
	return s.Put(ctx, ev.Subject(), c)
}

// liveEntry is what a projection stores at a key (the envelope).
type liveEntry struct {
	Seq   uint64          `json:"seq"`
	Value json.RawMessage `json:"value"`
}

func readCounts(t *testing.T, kv jetstream.KeyValue) (map[string]runCount, map[string]uint64) {
	t.Helper()
	ctx := testCtx(t)
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatalf("keys: %v", err)
	}
	counts := map[string]runCount{}
	revs := map[string]uint64{}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		var env liveEntry
		var c runCount
		if err := json.Unmarshal(e.Value(), &env); err != nil {
			t.Fatalf("%s: %s is not an envelope: %v", k, e.Value(), err)
		}
		if err := json.Unmarshal(env.Value, &c); err != nil {
			t.Fatalf("%s: value %s: %v", k, env.Value, err)
		}
		counts[k], revs[k] = c, e.Revision()
	}
	return counts, revs
}

func TestProjectionReplayAndIdempotence(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	ctx := testCtx(t)
	p := countProjection{bucket: "test_counts"}
	topo := events.DefaultTopology()
	if err := events.ProvisionBucket(ctx, js, topo, events.BucketSpec{Name: p.Bucket()}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, p.Bucket())
	if err != nil {
		t.Fatal(err)
	}

	// 3 aggregates with 1, 2 and 4 events, a confirm event the projection
	// does not watch, and one message the gate refuses.
	want := map[string]int{"a": 1, "b": 2, "c": 4}
	n := 0
	for _, agg := range []string{"c", "a", "b", "c", "b", "c", "c"} {
		n++
		publish(t, bus, newEvent(t, events.RunStepFailed, agg, fmt.Sprintf("e%d", n), stepFailedData))
	}
	publish(t, bus, newEvent(t, events.ConfirmAnswered, "x", "answer-x", answeredData))
	publishRaw(t, jsOf(t, env), &nats.Msg{Subject: "heed.run.a.started", Data: []byte("not an event")})

	c1, err := events.RunProjector(ctx, bus, p, eventstest.Logger(t))
	if err != nil {
		t.Fatalf("RunProjector: %v", err)
	}
	t.Cleanup(func() { stopConsumer(c1) })
	name := events.ProjectorName(p)
	if name != "proj-counts" {
		t.Errorf("ProjectorName = %q, want proj-counts", name)
	}
	waitIdle(t, js, name)
	counts, revs := readCounts(t, kv)
	assertCounts(t, "after projecting", counts, want)
	if got := counts["c"]; got.Last != string(events.RunStepFailed) || got.At != fixedTime.Format(time.RFC3339Nano) {
		t.Errorf("c = %+v: last type and event time not projected", got)
	}
	if s := c1.Stats(); s.Handled != uint64(n) || s.DeadLettered != 1 {
		t.Errorf("projector stats = %+v, want %d handled, 1 dead-lettered", s, n)
	}

	rep := replay(t, bus, p, topo)
	if !rep.Identical() {
		t.Fatalf("replay differs from the live bucket: %+v", rep)
	}
	if rep.Events != n || rep.Skipped != 1 || rep.Keys != len(want) {
		t.Errorf("replay applied %d events, skipped %d, rebuilt %d keys; want %d, 1, %d", rep.Events, rep.Skipped, rep.Keys, n, len(want))
	}
	if rep.ReplayedTo != "test_counts_replay" {
		t.Errorf("ReplayedTo = %q", rep.ReplayedTo)
	}
	fresh, err := js.KeyValue(ctx, rep.ReplayedTo)
	if err != nil {
		t.Fatalf("rebuild bucket: %v", err)
	}
	rebuilt, _ := readCounts(t, fresh)
	assertCounts(t, "rebuild bucket", rebuilt, want)

	// A second projector over the same log (the durable consumer deleted,
	// as after a lost consumer or a reset) re-applies every event; the
	// sequence guard makes each a no-op: no count doubles, no key is even
	// rewritten.
	stopConsumer(c1)
	if err := js.DeleteConsumer(ctx, events.EventStream, name); err != nil {
		t.Fatalf("delete consumer: %v", err)
	}
	c2, err := events.RunProjector(ctx, bus, p, eventstest.Logger(t))
	if err != nil {
		t.Fatalf("RunProjector again: %v", err)
	}
	t.Cleanup(func() { stopConsumer(c2) })
	waitIdle(t, js, name)
	if s := c2.Stats(); s.Handled != uint64(n) {
		t.Fatalf("second projector handled %d events, want all %d again", s.Handled, n)
	}
	counts2, revs2 := readCounts(t, kv)
	assertCounts(t, "after re-applying the whole log", counts2, want)
	if !reflect.DeepEqual(revs2, revs) {
		t.Errorf("re-applying rewrote keys: revisions %v, before %v", revs2, revs)
	}

	// New events still apply after the reset.
	publish(t, bus, newEvent(t, events.RunCompleted, "a", "done-a", json.RawMessage(`{"summary":"ok"}`)))
	want["a"] = 2
	waitIdle(t, js, name)
	counts3, _ := readCounts(t, kv)
	assertCounts(t, "after a new event", counts3, want)
	if rep := replay(t, bus, p, topo); !rep.Identical() {
		t.Fatalf("replay after the reset differs: %+v", rep)
	}

	// Tamper with the live bucket: replay names each damaged key.
	e, err := kv.Get(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	var env0 liveEntry
	if err := json.Unmarshal(e.Value(), &env0); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "b", []byte(fmt.Sprintf(`{"seq":%d,"value":{"events":99,"last":"heed.run.step.failed","at":"x"}}`, env0.Seq))); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "c", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "zombie", []byte(`{"seq":1,"value":{"events":1}}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rep = replay(t, bus, p, topo)
	if rep.Identical() {
		t.Fatalf("replay reports identical after corrupting the live bucket")
	}
	for _, check := range []struct {
		what      string
		got, want []string
	}{
		{"Different", rep.Different, []string{"b", "c"}},
		{"Extra", rep.Extra, []string{"zombie"}},
		{"Missing", rep.Missing, []string{"a"}},
	} {
		if strings.Join(check.got, ",") != strings.Join(check.want, ",") {
			t.Errorf("replay %s = %v, want %v", check.what, check.got, check.want)
		}
	}

	// Repair: --apply swaps the rebuild in for the 4 damaged keys; a second
	// replay finds nothing to say, and no scratch bucket is left behind.
	fixed, err := events.Replay(ctx, bus, p, topo, events.ReplayApply{})
	if err != nil {
		t.Fatalf("Replay apply: %v", err)
	}
	if fixed.Applied != 4 || fixed.Identical() || fixed.ReplayedTo != "" {
		t.Errorf("apply = %+v, want 4 keys applied, the differences reported, no scratch bucket", fixed)
	}
	if rep := replayPlain(t, bus, p, topo); !rep.Identical() {
		t.Fatalf("replay after apply differs: %+v", rep)
	}
	counts4, _ := readCounts(t, kv)
	assertCounts(t, "after apply", counts4, want)
	assertNoScratch(t, js)
}

// assertNoScratch checks that no replay scratch bucket is left.
func assertNoScratch(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	for name := range js.KeyValueStoreNames(testCtx(t)).Name() {
		if strings.HasSuffix(name, "_replay") {
			t.Errorf("scratch bucket %s left behind", name)
		}
	}
}

func replayPlain(t *testing.T, bus *events.Bus, p events.Projection, topo events.Topology) *events.ReplayReport {
	t.Helper()
	rep, err := events.Replay(testCtx(t), bus, p, topo)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return rep
}

// TestReplayApplyWhileLive repairs a purged bucket while events keep
// arriving and the live projector keeps writing: the apply's batch fails
// whenever the projector wrote in between and is tried again, and the
// result matches the log exactly.
func TestReplayApplyWhileLive(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	ctx := testCtx(t)
	p := countProjection{bucket: "test_live"}
	topo := events.DefaultTopology()
	if err := events.ProvisionBucket(ctx, js, topo, events.BucketSpec{Name: p.Bucket()}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, p.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		publish(t, bus, newEvent(t, events.RunStepFailed, fmt.Sprintf("r%d", i%40), fmt.Sprintf("e%d", i), stepFailedData))
	}
	c, err := events.RunProjector(ctx, bus, p, eventstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopConsumer(c) })
	waitIdle(t, js, events.ProjectorName(p))
	// The operator's mistake: the bucket purged.
	ks, err := js.Stream(ctx, "KV_"+p.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if rep := replayPlain(t, bus, p, topo); len(rep.Missing) != 40 {
		t.Fatalf("after the purge replay reports %d missing keys, want 40: %+v", len(rep.Missing), rep)
	}
	// Events keep arriving while the repair runs.
	done := make(chan struct{})
	t.Cleanup(func() { <-done }) // a Fatal below: the publisher ends before the test's connection
	go func() {
		defer close(done)
		for i := 200; i < 400; i++ {
			if _, err := bus.Publish(ctx, newEvent(t, events.RunStepFailed, fmt.Sprintf("r%d", i%50), fmt.Sprintf("e%d", i), stepFailedData)); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
		}
	}()
	rep, err := events.Replay(ctx, bus, p, topo, events.ReplayApply{Attempts: 50})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	t.Logf("apply: %d keys in %d attempts", rep.Applied, rep.Attempts)
	<-done
	waitIdle(t, js, events.ProjectorName(p))
	if rep := replayPlain(t, bus, p, topo); !rep.Identical() {
		t.Fatalf("replay after apply differs: %+v", rep)
	}
	counts, _ := readCounts(t, kv)
	want := map[string]int{}
	for i := range 400 {
		if i < 200 {
			want[fmt.Sprintf("r%d", i%40)]++
		} else {
			want[fmt.Sprintf("r%d", i%50)]++
		}
	}
	assertCounts(t, "after the repair and the live events", counts, want)
	assertNoScratch(t, js)
}

// deleteProjection keeps a key per open aggregate and deletes it when the
// aggregate completes.
type deleteProjection struct{}

func (deleteProjection) Name() string      { return "open" }
func (deleteProjection) Bucket() string    { return "test_open" }
func (deleteProjection) Filters() []string { return []string{"heed.run.>"} }
func (deleteProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	if events.Type(ev.Type()) == events.RunCompleted {
		return s.Delete(ctx, "open."+ev.Subject())
	}
	return s.Put(ctx, "open."+ev.Subject(), map[string]string{"last": ev.ID()})
}

// TestProjectionDeleteLeavesNothing: a deleted key is gone from the bucket
// (no tombstone value), its marker carries a TTL, and replay agrees.
func TestProjectionDeleteLeavesNothing(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	ctx := testCtx(t)
	p := deleteProjection{}
	topo := events.DefaultTopology()
	if err := events.ProvisionBucket(ctx, js, topo, events.BucketSpec{Name: p.Bucket()}); err != nil {
		t.Fatal(err)
	}
	publish(t, bus, newEvent(t, events.RunStepFailed, "a", "a1", stepFailedData))
	publish(t, bus, newEvent(t, events.RunStepFailed, "b", "b1", stepFailedData))
	publish(t, bus, newEvent(t, events.RunCompleted, "a", "a2", json.RawMessage(`{"summary":"ok"}`)))
	c, err := events.RunProjector(ctx, bus, p, eventstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopConsumer(c) })
	waitIdle(t, js, events.ProjectorName(p))
	kv, err := js.KeyValue(ctx, p.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "open.b" {
		t.Errorf("keys = %v, want only open.b", keys)
	}
	// The purge marker is the only message left on the deleted key, and
	// it expires.
	s, err := js.Stream(ctx, "KV_"+p.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "$KV."+p.Bucket()+".open.a")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("KV-Operation") != "PURGE" || m.Header.Get(jetstream.MsgTTLHeader) != events.DeleteMarkerTTL.String() {
		t.Errorf("the deleted key's last message has headers %v, want a purge marker with TTL %s", m.Header, events.DeleteMarkerTTL)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("bucket stream holds %d messages, want 2 (open.b and one marker)", info.State.Msgs)
	}
	if rep := replayPlain(t, bus, p, topo); !rep.Identical() || rep.Keys != 1 {
		t.Errorf("replay = %+v, want identical with 1 key", rep)
	}
}

func replay(t *testing.T, bus *events.Bus, p events.Projection, topo events.Topology) *events.ReplayReport {
	t.Helper()
	rep, err := events.Replay(testCtx(t), bus, p, topo, events.ReplayKeep{})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return rep
}

func assertCounts(t *testing.T, when string, got map[string]runCount, want map[string]int) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d keys %v, want %d", when, len(got), got, len(want))
	}
	for k, w := range want {
		if got[k].Events != w {
			t.Errorf("%s: count of %s = %d, want %d", when, k, got[k].Events, w)
		}
	}
}

func TestReplayWithoutProjectorIsUnavailable(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := testCtx(t)
	p := countProjection{bucket: "idle_counts"}
	if err := events.ProvisionBucket(ctx, bus.JetStream(), events.DefaultTopology(), events.BucketSpec{Name: p.Bucket()}); err != nil {
		t.Fatal(err)
	}
	publish(t, bus, newEvent(t, events.RunStarted, "r1", "s1", runStartedData))
	_, err := events.Replay(ctx, bus, p, events.DefaultTopology())
	if events.CodeOf(err) != events.CodeUnavailable || !strings.Contains(err.Error(), "proj-counts") {
		t.Fatalf("Replay without a running projector: err = %v, want %s naming proj-counts", err, events.CodeUnavailable)
	}
	if _, err := events.RunProjector(ctx, bus, countProjection{bucket: "no_such_bucket"}, nil); events.CodeOf(err) != events.CodeUnavailable {
		t.Fatalf("RunProjector on a missing bucket: err = %v, want %s", err, events.CodeUnavailable)
	}
}

// TestReplayApplyRetriesWhenTheBucketMoved: a live projector's write
// between the comparison and the apply makes the batch fail as a whole
// (nothing of it is applied), and the apply compares again and succeeds.
func TestReplayApplyRetriesWhenTheBucketMoved(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	ctx := testCtx(t)
	p := countProjection{bucket: "test_moved"}
	topo := events.DefaultTopology()
	if err := events.ProvisionBucket(ctx, js, topo, events.BucketSpec{Name: p.Bucket()}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		publish(t, bus, newEvent(t, events.RunStepFailed, fmt.Sprintf("m%d", i%3), fmt.Sprintf("m-e%d", i), stepFailedData))
	}
	c, err := events.RunProjector(ctx, bus, p, eventstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopConsumer(c) })
	name := events.ProjectorName(p)
	waitIdle(t, js, name)
	kv, err := js.KeyValue(ctx, p.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "m0"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "m1", []byte(`{"seq":1,"value":{"events":42}}`)); err != nil {
		t.Fatal(err)
	}
	moved := 0
	hook := events.ReplayBeforeApply(func() {
		if moved > 0 {
			return
		}
		moved++
		// The live projector writes m2 after the comparison.
		publish(t, bus, newEvent(t, events.RunStepFailed, "m2", "m-late", stepFailedData))
		waitIdle(t, js, name)
	})
	rep, err := events.Replay(ctx, bus, p, topo, events.ReplayApply{}, hook)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if rep.Attempts != 2 || rep.Applied != 2 {
		t.Errorf("apply = %+v; want 2 attempts (the first refused), 2 keys applied by the second", rep)
	}
	if rep := replayPlain(t, bus, p, topo); !rep.Identical() {
		t.Fatalf("replay after apply differs: %+v", rep)
	}
	counts, _ := readCounts(t, kv)
	assertCounts(t, "after apply", counts, map[string]int{"m0": 2, "m1": 2, "m2": 3})
}

// TestProvisionBucketUpgradesAnOldBucket: a bucket made before deleted
// keys were purged (no per-message TTL, no marker TTL, tombstone values)
// is updated in place by provisioning, keeps its keys, and then takes
// deletes with expiring markers.
func TestProvisionBucketUpgradesAnOldBucket(t *testing.T) {
	env := eventstest.Start(t)
	js := env.Bus(t).JetStream()
	ctx := testCtx(t)
	old, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "test_old", History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "gone", []byte(`{"seq":3,"deleted":true}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "kept", []byte(`{"seq":4,"value":{"events":1}}`)); err != nil {
		t.Fatal(err)
	}
	if err := events.ProvisionBucket(ctx, js, events.DefaultTopology(), events.BucketSpec{Name: "test_old"}); err != nil {
		t.Fatalf("provision over an old bucket: %v", err)
	}
	kv, err := js.KeyValue(ctx, "test_old")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	if cfg.SubjectDeleteMarkerTTL != events.DeleteMarkerTTL || !cfg.AllowMsgTTL {
		t.Errorf("the old bucket was not given per-message TTLs and the marker TTL: %+v", cfg)
	}
	if e, err := kv.Get(ctx, "kept"); err != nil || !strings.Contains(string(e.Value()), `"events":1`) {
		t.Errorf("kept = %v, %v", e, err)
	}
	if err := kv.Purge(ctx, "kept", jetstream.PurgeTTL(events.DeleteMarkerTTL)); err != nil {
		t.Errorf("a purge with a marker TTL on the upgraded bucket: %v", err)
	}
}

// TestReplayApplyManyKeys: more keys to change than one atomic batch may
// hold go in guarded batches of MaxAtomicBatch, and all of them land.
func TestReplayApplyManyKeys(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	ctx := testCtx(t)
	p := countProjection{bucket: "test_many"}
	topo := events.DefaultTopology()
	if err := events.ProvisionBucket(ctx, js, topo, events.BucketSpec{Name: p.Bucket()}); err != nil {
		t.Fatal(err)
	}
	n := events.MaxAtomicBatch*2 + 500
	want := map[string]int{}
	evs := make([]events.Event, 0, n)
	for i := range n {
		agg := fmt.Sprintf("k%d", i)
		want[agg] = 1
		evs = append(evs, *newEvent(t, events.RunStepFailed, agg, "many-"+agg, stepFailedData))
	}
	if err := bus.PublishAll(ctx, evs); err != nil {
		t.Fatal(err)
	}
	c, err := events.RunProjector(ctx, bus, p, eventstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopConsumer(c) })
	waitIdle(t, js, events.ProjectorName(p))
	s, err := js.Stream(ctx, "KV_"+p.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := events.Replay(ctx, bus, p, topo, events.ReplayApply{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if rep.Applied != n || len(rep.Missing) != n {
		t.Errorf("applied %d keys (%d missing); want %d", rep.Applied, len(rep.Missing), n)
	}
	if rep := replayPlain(t, bus, p, topo); !rep.Identical() {
		t.Fatalf("replay after apply differs: %d missing, %d extra, %d different", len(rep.Missing), len(rep.Extra), len(rep.Different))
	}
	kv, err := js.KeyValue(ctx, p.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	counts, _ := readCounts(t, kv)
	assertCounts(t, "after apply", counts, want)
}

// refusingProjection counts like countProjection but refuses (poison) the
// events of aggregate "bad", as a projection refuses data it could never
// use.
type refusingProjection struct{ countProjection }

func (p refusingProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	if ev.Subject() == "bad" {
		return events.Poison(fmt.Errorf("aggregate %s is refused", ev.Subject()))
	}
	return p.countProjection.Apply(ctx, s, ev)
}

// An event a projection refuses is dead-lettered live and skipped by
// replay the same way: the rebuild matches the live bucket.
func TestReplaySkipsWhatTheProjectionRefuses(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	ctx := testCtx(t)
	p := refusingProjection{countProjection{bucket: "test_refusing"}}
	topo := events.DefaultTopology()
	if err := events.ProvisionBucket(ctx, js, topo, events.BucketSpec{Name: p.Bucket()}); err != nil {
		t.Fatal(err)
	}
	publish(t, bus, newEvent(t, events.RunStepFailed, "a", "e1", stepFailedData))
	publish(t, bus, newEvent(t, events.RunStepFailed, "bad", "e2", stepFailedData))
	publish(t, bus, newEvent(t, events.RunStepFailed, "a", "e3", stepFailedData))
	c, err := events.RunProjector(ctx, bus, p, eventstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopConsumer(c) })
	waitIdle(t, js, events.ProjectorName(p))
	if s := c.Stats(); s.DeadLettered != 1 {
		t.Errorf("projector stats = %+v, want 1 dead-lettered", s)
	}
	rep, err := events.Replay(ctx, bus, p, topo)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if !rep.Identical() || rep.Events != 2 || rep.Skipped != 1 || rep.Keys != 1 {
		t.Errorf("replay = %+v; want identical, 2 events applied, 1 skipped, 1 key", rep)
	}
}

// TestLeaderGetDirect: a projector's read of a one-replica bucket is a
// direct get, and gives what the stream API's message get gives for every
// state a key can be in: never written, written, overwritten, deleted,
// purged, removed by its TTL.
func TestLeaderGetDirect(t *testing.T) {
	env := eventstest.Start(t)
	js := env.Bus(t).JetStream()
	ctx := testCtx(t)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leaderget", LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	put := func(k, v string, opts ...jetstream.KVCreateOpt) {
		t.Helper()
		if len(opts) > 0 {
			if _, err := kv.Create(ctx, k, []byte(v), opts...); err != nil {
				t.Fatal(err)
			}
			return
		}
		if _, err := kv.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	put("written", "1")
	put("overwritten", "1")
	put("overwritten", "2")
	put("deleted", "1")
	if err := kv.Delete(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	put("purged", "1")
	if err := kv.Purge(ctx, "purged"); err != nil {
		t.Fatal(err)
	}
	put("expires", "1", jetstream.KeyTTL(time.Second))
	eventstest.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		if _, err := kv.Get(ctx, "expires"); err == nil {
			return errors.New("the key with a TTL is still there")
		}
		return nil
	})
	for _, key := range []string{"never", "written", "overwritten", "deleted", "purged", "expires"} {
		v1, rev1, err1 := events.LeaderGet(ctx, js, "leaderget", key, false)
		v2, rev2, err2 := events.LeaderGet(ctx, js, "leaderget", key, true)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v / %v", key, err1, err2)
		}
		if string(v1) != string(v2) || rev1 != rev2 {
			t.Fatalf("%s: the stream API gives %q rev %d, a direct get %q rev %d", key, v1, rev1, v2, rev2)
		}
		want := map[string]string{"written": "1", "overwritten": "2"}[key]
		if string(v2) != want || (want != "") != (rev2 != 0) {
			t.Fatalf("%s: %q rev %d, want %q", key, v2, rev2, want)
		}
	}
}
