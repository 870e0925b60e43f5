package events_test

import (
	"context"
	"encoding/json"
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
}

func replay(t *testing.T, bus *events.Bus, p events.Projection, topo events.Topology) *events.ReplayReport {
	t.Helper()
	rep, err := events.Replay(testCtx(t), bus, p, topo)
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
