package events_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRestartKeepsEverything stops the server and starts a new one on the
// same data directory: every stream, message, dead letter, KV entry and
// durable consumer position survives, and provisioning again (which every
// service does at start) wipes nothing.
func TestRestartKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	topo := events.DefaultTopology()
	bucket := events.BucketSpec{Name: "restart_state", Description: "test bucket", History: 3}
	topo.Buckets = []events.BucketSpec{bucket}

	// First life.
	env := eventstest.StartIn(t, dir)
	bus := env.Bus(t)
	js := bus.JetStream()
	ctx := testCtx(t)

	type stored struct {
		subject string
		data    []byte
		id      string
	}
	var want []stored
	for i := range 10 {
		ev := newEvent(t, events.RunStepFailed, fmt.Sprintf("r%d", i%3), fmt.Sprintf("ev-%d", i), stepFailedData)
		publish(t, bus, ev)
		want = append(want, stored{events.SubjectOf(ev), ev.Data(), ev.ID()})
	}
	// A bad message, dead-lettered by a durable consumer that then stops.
	publishRaw(t, js, rawMsg(t, newEvent(t, "heed.run.exploded", "r0", "bad", runStartedData)))
	handled := 0
	c := consume(t, bus, events.ConsumerConfig{Name: "survivor"}, func(context.Context, *events.Delivery) ([]events.Event, error) {
		handled++ // one worker: no race
		return nil, nil
	})
	waitIdle(t, js, "survivor")
	stopConsumer(c)
	if handled != len(want) {
		t.Fatalf("before restart: handled %d, want %d", handled, len(want))
	}
	beforeConsumer := consumerInfo(t, js, "survivor")

	if err := events.ProvisionBucket(ctx, js, topo, bucket); err != nil {
		t.Fatalf("ProvisionBucket: %v", err)
	}
	kv, err := js.KeyValue(ctx, bucket.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1", "v2", "v3"} {
		if _, err := kv.Put(ctx, "run.r1", []byte(v)); err != nil {
			t.Fatalf("kv put: %v", err)
		}
	}
	if _, err := kv.Put(ctx, "run.r2", []byte("only")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "run.r2"); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, js)

	env.Server.Stop()

	// Second life on the same directory (StartIn provisions again).
	env2 := eventstest.StartIn(t, dir)
	bus2 := env2.Bus(t)
	js2 := bus2.JetStream()
	ctx2 := testCtx(t)
	// And once more with the buckets, as a service would.
	if err := events.Provision(ctx2, js2, topo); err != nil {
		t.Fatalf("Provision after restart: %v", err)
	}

	if after := snapshot(t, js2); after != before {
		t.Errorf("stream state changed across restart:\nbefore %s\n after %s", before, after)
	}
	es, err := js2.Stream(ctx2, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		m, err := es.GetMsg(ctx2, uint64(i+1))
		if err != nil {
			t.Fatalf("message %d after restart: %v", i+1, err)
		}
		if m.Subject != w.subject || !bytes.Equal(m.Data, w.data) || m.Header.Get("ce-id") != w.id {
			t.Errorf("message %d after restart = %s %s %s, want %s %s %s", i+1, m.Subject, m.Header.Get("ce-id"), m.Data, w.subject, w.id, w.data)
		}
		ev, err := bus2.Codec().DecodeStored(events.RawMsg{Subject: m.Subject, Header: m.Header, Data: m.Data, Seq: m.Sequence, Stored: m.Time})
		if err != nil {
			t.Errorf("message %d does not decode after restart: %v", i+1, err)
		} else if !ev.Time().Equal(fixedTime) {
			t.Errorf("message %d time = %s, want %s", i+1, ev.Time(), fixedTime)
		}
	}
	if n := streamCount(t, js2, events.DLQStream, "heed.dlq.run.r0.exploded"); n != 1 {
		t.Errorf("dead letters after restart = %d, want 1", n)
	}

	kv2, err := js2.KeyValue(ctx2, bucket.Name)
	if err != nil {
		t.Fatalf("bucket after restart: %v", err)
	}
	e, err := kv2.Get(ctx2, "run.r1")
	if err != nil || string(e.Value()) != "v3" || e.Revision() != 3 {
		t.Fatalf("run.r1 after restart = %v (err %v), want v3 at revision 3", e, err)
	}
	hist, err := kv2.History(ctx2, "run.r1")
	if err != nil || len(hist) != 3 {
		t.Errorf("run.r1 history after restart: %d entries (err %v), want 3", len(hist), err)
	}
	if _, err := kv2.Get(ctx2, "run.r2"); err != jetstream.ErrKeyNotFound {
		t.Errorf("deleted key after restart: err = %v, want ErrKeyNotFound", err)
	}

	// The durable consumer resumes where it stopped: nothing is redelivered.
	afterConsumer := consumerInfo(t, js2, "survivor")
	if afterConsumer.AckFloor.Stream != beforeConsumer.AckFloor.Stream || afterConsumer.NumPending != 0 {
		t.Errorf("consumer after restart: ack floor %d, %d pending; before: ack floor %d",
			afterConsumer.AckFloor.Stream, afterConsumer.NumPending, beforeConsumer.AckFloor.Stream)
	}
	redelivered := 0
	c2 := consume(t, bus2, events.ConsumerConfig{Name: "survivor"}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		redelivered++
		return nil, nil
	})
	ev := newEvent(t, events.RunStepFailed, "r9", "after-restart", stepFailedData)
	publish(t, bus2, ev)
	waitIdle(t, js2, "survivor")
	stopConsumer(c2)
	if redelivered != 1 || c2.Stats().DeadLettered != 0 {
		t.Errorf("after restart the consumer handled %d events and dead-lettered %d, want only the new event", redelivered, c2.Stats().DeadLettered)
	}
}

// snapshot summarises both streams and the bucket's stream.
func snapshot(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	ctx := testCtx(t)
	var out string
	for _, name := range []string{events.EventStream, events.DLQStream, "KV_restart_state"} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st := info.State
		out += fmt.Sprintf("%s{msgs=%d bytes=%d first=%d last=%d} ", name, st.Msgs, st.Bytes, st.FirstSeq, st.LastSeq)
	}
	return out
}
