package indexer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/services/indexer"
)

// TestIndexTallyCountsWhatDecodes: the index's tally of a run (how many
// events, the last one's id), as readmodel.IndexTally reads it, is what
// a reader of the run's subject that skips what does not decode counts:
// the runner checks a parked run read back by position against it.
// Garbage on the run's subject, dead-lettered, counts for neither.
func TestIndexTallyCountsWhatDecodes(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range indexer.Buckets() {
		if err := events.ProvisionBucket(ctx, bus.JetStream(), events.DefaultTopology(), b); err != nil {
			t.Fatal(err)
		}
	}
	proj, err := events.RunProjector(ctx, bus, indexer.Projection{}, eventstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer proj.Stop(context.Background())
	if n, last, err := readmodel.IndexTally(ctx, bus.JetStream(), "run", "t1"); err != nil || n != 0 || last != "" {
		t.Fatalf("tally of an unknown run: %d %q %v; want 0, none", n, last, err)
	}
	publish := func(typ events.Type, id string, data any) {
		t.Helper()
		ev, err := events.NewEvent(typ, "t1", id, "test", data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.Publish(ctx, &ev); err != nil {
			t.Fatal(err)
		}
	}
	publish(events.RunStarted, "t1/started", events.RunStartedData{Skill: "mine", Driver: "agent"})
	for i := range 3 {
		publish(events.RunStepStarted, fmt.Sprintf("t1/s%d", i), events.StepStartedData{Step: "s", Index: i, Attempt: 1, Kind: "compute"})
	}
	if _, err := bus.JetStream().PublishMsg(ctx, &nats.Msg{Subject: "heed.run.t1.step.failed", Data: []byte("garbage")}); err != nil {
		t.Fatal(err)
	}
	var want struct {
		n    int
		last string
	}
	if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, events.SubjectFilter("run", "t1"), 0, func(raw events.RawMsg) error {
		if ev, err := bus.Codec().DecodeStored(raw); err == nil {
			want.n, want.last = want.n+1, ev.ID()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want.n != 4 || want.last != "t1/s2" {
		t.Fatalf("the log's tally: %+v", want)
	}
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		n, last, err := readmodel.IndexTally(ctx, bus.JetStream(), "run", "t1")
		if err != nil {
			return err
		}
		if n != want.n || last != want.last {
			return fmt.Errorf("index tally %d %q, the log's %d %q", n, last, want.n, want.last)
		}
		return nil
	})
}
