package events_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
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

// A fast batch stores a prefix: the server stops at the first message it
// refuses (here a guard that does not hold), and nothing after it is
// stored, though it was sent.
func TestFastBatchStopsAtTheFirstRefusal(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	msg := func(id string, guard string) *nats.Msg {
		m := nats.NewMsg("heed.run.fb.step." + id)
		m.Header.Set("Nats-Msg-Id", "fb-"+id)
		if guard != "" {
			m.Header.Set("Nats-Expected-Last-Subject-Sequence", guard)
		}
		m.Data = []byte(`{}`)
		return m
	}
	n, err := events.WriteBatch(testCtx(t), bus, []*nats.Msg{msg("a", ""), msg("b", "999"), msg("c", ""), msg("d", "")})
	if n != 1 {
		t.Fatalf("stored %d of the batch, want 1 (the message before the refused one)", n)
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("err = %v, want the refusal of the guard (wrong last sequence)", err)
	}
	got := runEvents(t, bus.JetStream(), "fb")
	if len(got) != 1 {
		t.Fatalf("the stream holds %d of the batch's messages, want 1: %v", len(got), got)
	}
	// Sent again without the guard, as a retry does: the stored first is
	// dropped as a duplicate and the rest follow it, in order.
	n, err = events.WriteBatch(testCtx(t), bus, []*nats.Msg{msg("a", ""), msg("b", ""), msg("c", "")})
	if err != nil || n != 3 {
		t.Fatalf("the batch again: %d, %v; want 3 (a duplicate and two stored), nil", n, err)
	}
	got = runEvents(t, bus.JetStream(), "fb")
	if len(got) != 3 || got[1].seq <= got[0].seq || got[2].seq <= got[1].seq {
		t.Fatalf("the stream holds %v, want a, b, c once each, in order", got)
	}
}

// On a stream that does not allow fast batches (provisioned by a heed
// before them), PublishAll writes the events one after the other, and
// says so once.
func TestPublishAllWithoutFastBatches(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	var logged bytes.Buffer
	bus.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
	js := bus.JetStream()
	cfg := events.DefaultTopology().EventStreamConfig()
	cfg.AllowBatchPublish = false
	if _, err := js.UpdateStream(testCtx(t), cfg); err != nil {
		t.Fatal(err)
	}
	evs := []events.Event{
		*newEvent(t, events.RunStepFailed, "nb", "nb-0", stepFailedData),
		*newEvent(t, events.RunStepFailed, "nb", "nb-1", stepFailedData),
		*newEvent(t, events.RunStepFailed, "nb", "nb-2", stepFailedData),
	}
	for round := range 2 { // the first finds batches refused, the second knows
		if err := bus.PublishAll(testCtx(t), evs); err != nil {
			t.Fatalf("round %d: PublishAll: %v", round, err)
		}
	}
	got := runEvents(t, js, "nb")
	if len(got) != 3 || got[0].id != "nb-0" || got[1].id != "nb-1" || got[2].id != "nb-2" {
		t.Fatalf("stored %v, want nb-0, nb-1, nb-2 once each, in order", got)
	}
	if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "allow_batched") {
		t.Fatalf("the log says (%d warnings, want 1 naming allow_batched):\n%s", n, logged.String())
	}
}

// A batch of one commits at once; a batch no stream captures is refused
// as a publish would be (no responders), not left to time out.
func TestFastBatchEdges(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	one := nats.NewMsg("heed.run.fe.step.one")
	one.Header.Set("Nats-Msg-Id", "fe-one")
	one.Data = []byte(`{}`)
	start := time.Now()
	if n, err := events.WriteBatch(testCtx(t), bus, []*nats.Msg{one}); err != nil || n != 1 {
		t.Fatalf("a batch of one: %d, %v; want 1, nil", n, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a batch of one took %s: its commit did not come", d)
	}
	lost := nats.NewMsg("nostream.fe")
	lost.Data = []byte(`{}`)
	if _, err := events.WriteBatch(testCtx(t), bus, []*nats.Msg{lost, lost}); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a batch no stream captures: %v, want no responders", err)
	}
}

// PublishAllGuarded writes a decision's events in one batch only while its
// guard holds: a second writer on the same expectation, and a retry of
// the same events after they were stored, write nothing and are told the
// log moved (ErrStaleRead), also when the first event has the id of one
// in the log (a fast batch drops such a duplicate silently and stores
// what follows it, which is why the first goes without Nats-Msg-Id). The
// same on a stream that does not allow batches.
func TestPublishAllGuarded(t *testing.T) {
	for _, batches := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast batch", false: "one at a time"}[batches], func(t *testing.T) {
			env := eventstest.Start(t)
			bus := env.Bus(t)
			js := bus.JetStream()
			if !batches {
				cfg := events.DefaultTopology().EventStreamConfig()
				cfg.AllowBatchPublish = false
				if _, err := js.UpdateStream(testCtx(t), cfg); err != nil {
					t.Fatal(err)
				}
			}
			mk := func(prefix string) []events.Event {
				return []events.Event{
					*newEvent(t, events.RunStepFailed, "gb", prefix+"-0", stepFailedData),
					*newEvent(t, events.RunStepFailed, "gb", prefix+"-1", stepFailedData),
					*newEvent(t, events.RunStepFailed, "gb", prefix+"-2", stepFailedData),
				}
			}
			guard := events.ExpectLastSubjectSeq{Subject: "heed.run.gb.>", Seq: 0}
			seq, err := bus.PublishAllGuarded(testCtx(t), mk("w"), guard)
			if err != nil {
				t.Fatalf("the first writer: %v", err)
			}
			got := runEvents(t, js, "gb")
			if len(got) != 3 || got[0].id != "w-0" || got[2].id != "w-2" || seq != got[2].seq {
				t.Fatalf("stored %v, returned seq %d; want w-0, w-1, w-2 in order and the last one's seq", got, seq)
			}
			for name, evs := range map[string][]events.Event{"a retry of the same events": mk("w"), "a second writer": mk("l")} {
				if _, err := bus.PublishAllGuarded(testCtx(t), evs, guard); !errors.Is(err, events.ErrStaleRead) {
					t.Fatalf("%s: %v, want ErrStaleRead", name, err)
				}
			}
			if n := streamCount(t, js, events.EventStream, "heed.run.gb.>"); n != 3 {
				t.Fatalf("after the losers: %d events, want 3", n)
			}
			// Guarded by what it read last, the next decision goes on.
			seq2, err := bus.PublishAllGuarded(testCtx(t), mk("n"), events.ExpectLastSubjectSeq{Subject: "heed.run.gb.>", Seq: seq})
			if err != nil || seq2 <= seq {
				t.Fatalf("the next decision: seq %d, %v", seq2, err)
			}
			if n := streamCount(t, js, events.EventStream, "heed.run.gb.>"); n != 6 {
				t.Fatalf("after the next decision: %d events, want 6", n)
			}
			// A guard behind the first: the batch stops at it, after what
			// came before it.
			other := *newEvent(t, events.RunStepFailed, "gb2", "o-0", stepFailedData)
			publish(t, bus, &other)
			evs := append(mk("m")[:2], *newEvent(t, events.RunStepFailed, "gb2", "o-1", stepFailedData))
			_, err = bus.PublishAllGuarded(testCtx(t), evs, events.ExpectLastSubjectSeq{Subject: "heed.run.gb.>", Seq: seq2},
				events.GuardAt{Index: 2, Guard: events.ExpectLastSubjectSeq{Subject: "heed.run.gb2.>", Seq: 0}})
			if !errors.Is(err, events.ErrStaleRead) {
				t.Fatalf("a batch whose third event's guard fails: %v, want ErrStaleRead", err)
			}
			if n := streamCount(t, js, events.EventStream, "heed.run.gb.>"); n != 8 {
				t.Fatalf("the two events before the refused one: %d events, want 8", n)
			}
			if n := streamCount(t, js, events.EventStream, "heed.run.gb2.>"); n != 1 {
				t.Fatalf("the refused event: %d events on its aggregate, want 1", n)
			}
			if _, err := bus.PublishAllGuarded(testCtx(t), mk("x")[:1], guard, events.GuardAt{Index: 1}); err == nil {
				t.Fatal("a guard past the batch's end was taken")
			}
		})
	}
}

// An event behind the first whose id the stream has already was written
// by another writer that read the log after this writer's first event:
// written one at a time, the events are refused from there
// (ErrStaleRead), as they would be by a guard. (In a fast batch the
// events follow the first back to back: another writer cannot come in
// between, and nats-server drops a duplicate without a word.)
func TestPublishAllGuardedStopsAtAnotherWritersEvent(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	cfg := events.DefaultTopology().EventStreamConfig()
	cfg.AllowBatchPublish = false
	if _, err := js.UpdateStream(testCtx(t), cfg); err != nil {
		t.Fatal(err)
	}
	publish(t, bus, newEvent(t, events.RunStepFailed, "gd", "w-0", stepFailedData))
	other := publish(t, bus, newEvent(t, events.RunStepFailed, "gd", "x-1", stepFailedData))
	evs := []events.Event{
		*newEvent(t, events.RunStepFailed, "gd", "w-1", stepFailedData),
		*newEvent(t, events.RunStepFailed, "gd", "x-1", stepFailedData),
		*newEvent(t, events.RunStepFailed, "gd", "w-2", stepFailedData),
	}
	_, err := bus.PublishAllGuarded(testCtx(t), evs, events.ExpectLastSubjectSeq{Subject: "heed.run.gd.>", Seq: other.Sequence})
	if !errors.Is(err, events.ErrStaleRead) {
		t.Fatalf("an event behind the first that another writer stored: %v, want ErrStaleRead", err)
	}
	got := runEvents(t, js, "gd")
	if len(got) != 3 || got[2].id != "w-1" {
		t.Fatalf("stored %v, want w-0, x-1, w-1 (nothing after the duplicate)", got)
	}
}
