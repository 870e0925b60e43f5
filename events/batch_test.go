package events_test

import (
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go/jetstream"
)

type storedID struct {
	id  string
	seq uint64
}

// runEvents reads every event of run with an ordered consumer.
func runEvents(t *testing.T, js jetstream.JetStream, run string) []storedID {
	t.Helper()
	cons, err := js.OrderedConsumer(testCtx(t), events.EventStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"heed.run." + run + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []storedID
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			md, _ := m.Metadata()
			out = append(out, storedID{id: m.Headers().Get("ce-id"), seq: md.Sequence.Stream})
			n++
		}
		if n == 0 {
			return out
		}
	}
}

// A decision's events written again after a crash that stored the first
// of them: the stored one is dropped as a duplicate, the others are
// stored once, after it, in order. Nothing to write is no write.
func TestPublishAllAfterAPartialWrite(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	evs := []events.Event{
		*newEvent(t, events.RunStepFailed, "rb", "rb-0", stepFailedData),
		*newEvent(t, events.RunStepFailed, "rb", "rb-1", stepFailedData),
		*newEvent(t, events.RunStepFailed, "rb", "rb-2", stepFailedData),
	}
	if err := bus.PublishAll(testCtx(t), nil); err != nil {
		t.Fatalf("PublishAll of nothing: %v", err)
	}
	publish(t, bus, &evs[0]) // a crash after the first of them was written
	if err := bus.PublishAll(testCtx(t), evs); err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	got := runEvents(t, js, "rb")
	if len(got) != 3 || got[0].id != "rb-0" || got[1].id != "rb-1" || got[2].id != "rb-2" {
		t.Fatalf("stored %v, want rb-0, rb-1, rb-2 once each, in order", got)
	}
	if err := bus.PublishAll(testCtx(t), evs); err != nil {
		t.Fatalf("PublishAll again: %v", err)
	}
	if n := streamCount(t, js, events.EventStream, "heed.run.rb.>"); n != 3 {
		t.Fatalf("after the events again: %d events, want 3", n)
	}
}
