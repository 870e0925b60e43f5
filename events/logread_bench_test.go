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

// BenchmarkReadHistoryNothingNew: a read of an aggregate from after its
// last message (a follower polling, a command waiting for the log) among
// 80,000 aggregates of one message each. ReadHistory asks for the
// aggregate's last message first; the first request by subject from there
// (what ReadHistory sent before) walks to the end of the log: with more
// than 64k subjects nats-server does not skip blocks by its subject index.
func BenchmarkReadHistoryNothingNew(b *testing.B) {
	env := eventstest.Start(b)
	bus := env.Bus(b)
	ctx := testCtx(b)
	const aggregates = 80000
	for a := range aggregates {
		ev := newEvent(b, events.RunStepFailed, fmt.Sprintf("r%d", a), fmt.Sprintf("r%d/0", a), stepFailedData)
		if _, err := bus.PublishAsync(ev); err != nil {
			b.Fatal(err)
		}
		if a%4000 == 3999 {
			<-bus.JetStream().PublishAsyncComplete()
		}
	}
	<-bus.JetStream().PublishAsyncComplete()
	filter := events.SubjectFilter("run", "r10")
	var last uint64
	if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, filter, 0, func(m events.RawMsg) error { last = m.Seq; return nil }); err != nil {
		b.Fatal(err)
	}
	b.Run("ReadHistory", func(b *testing.B) {
		for b.Loop() {
			if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, filter, last, func(events.RawMsg) error { b.Fatal("a message after the last"); return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An aggregate with nothing stored, read from the start (a follower
	// of a run not started yet).
	none := events.SubjectFilter("run", "r-none")
	b.Run("ReadHistory-nothing-stored", func(b *testing.B) {
		for b.Loop() {
			if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, none, 0, func(events.RawMsg) error { b.Fatal("a message of no aggregate"); return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first-request-by-subject", func(b *testing.B) {
		for b.Loop() {
			if m, _, err := events.FirstOf(ctx, bus.JetStream(), events.EventStream, filter, last+1); err != nil || m != nil {
				b.Fatal(m, err)
			}
		}
	})
}
