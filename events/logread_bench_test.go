package events_test

import (
	"fmt"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
)

// BenchmarkReadHistory compares the two ways to read the log: batched
// direct gets (ReadHistory) and an ordered consumer (ReadLog), for one
// aggregate's history (10 events among 20,000) and for a large read
// (every one of the 20,000). docs/ARCHITECTURE.md, History reads.
func BenchmarkReadHistory(b *testing.B) {
	env := eventstest.Start(b)
	bus := env.Bus(b)
	ctx := testCtx(b)
	const aggregates, each = 2000, 10
	for i := range each {
		for a := range aggregates {
			ev := newEvent(b, events.RunStepFailed, fmt.Sprintf("r%d", a), fmt.Sprintf("r%d/%d", a, i), stepFailedData)
			if _, err := bus.PublishAsync(ev); err != nil {
				b.Fatal(err)
			}
		}
		<-bus.JetStream().PublishAsyncComplete()
	}
	count := func(n *int) func(events.RawMsg) error {
		return func(events.RawMsg) error { *n++; return nil }
	}
	for _, c := range []struct {
		name   string
		filter string
		want   int
	}{{"aggregate", events.SubjectFilter("run", "r777"), each}, {"whole", "heed.run.>", aggregates * each}} {
		b.Run(c.name+"/direct", func(b *testing.B) {
			for b.Loop() {
				n := 0
				if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, c.filter, 0, count(&n)); err != nil || n != c.want {
					b.Fatalf("read %d, err %v; want %d", n, err, c.want)
				}
			}
		})
		b.Run(c.name+"/consumer", func(b *testing.B) {
			for b.Loop() {
				n := 0
				if _, err := events.ReadLog(ctx, bus.JetStream(), events.EventStream, []string{c.filter}, 0, count(&n)); err != nil || n != c.want {
					b.Fatalf("read %d, err %v; want %d", n, err, c.want)
				}
			}
		})
	}
}
