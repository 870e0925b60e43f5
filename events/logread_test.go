package events_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestReadHistory reads an aggregate's history with batched direct gets:
// the same messages, headers and times as the consumer-based ReadLog,
// across several batches, bounded by what was stored when the read began,
// and no consumer left behind (or created: none is counted during the read).
func TestReadHistory(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := testCtx(t)
	const n = 600 // more than two batches
	for i := range n {
		for _, agg := range []string{"ra", "rb"} {
			if _, err := bus.Publish(ctx, newEvent(t, events.RunStepFailed, agg, fmt.Sprintf("%s/%d", agg, i), stepFailedData)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A message the gate refuses is part of the history too.
	bad := rawMsg(t, newEvent(t, events.RunStepFailed, "ra", "ra/bad", map[string]any{"nope": true}))
	if _, err := bus.JetStream().PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	filter := events.SubjectFilter("run", "ra")
	var want []events.RawMsg
	wantLast, err := events.ReadLog(ctx, bus.JetStream(), events.EventStream, []string{filter}, 0, func(m events.RawMsg) error {
		want = append(want, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != n+1 {
		t.Fatalf("ReadLog read %d messages, want %d", len(want), n+1)
	}
	s, err := bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	before := consumers()

	var got []events.RawMsg
	published := false
	last, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, filter, 0, func(m events.RawMsg) error {
		if c := consumers(); c != before {
			t.Errorf("%d consumers during the read, %d before", c, before)
		}
		// Stored after the read began: not part of this read.
		if !published {
			published = true
			if _, err := bus.Publish(ctx, newEvent(t, events.RunStepFailed, "ra", "ra/late", stepFailedData)); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("ReadHistory read %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Subject != w.Subject || string(g.Data) != string(w.Data) || !g.Stored.Equal(w.Stored) {
			t.Fatalf("message %d: got seq %d %s at %v, want seq %d %s at %v", i, g.Seq, g.Subject, g.Stored, w.Seq, w.Subject, w.Stored)
		}
		for k, v := range w.Header {
			if !slices.Equal(g.Header[k], v) {
				t.Fatalf("message %d: header %s = %q, want %q", i, k, g.Header[k], v)
			}
		}
		if len(g.Header) != len(w.Header) {
			t.Fatalf("message %d: headers %v, want %v", i, g.Header, w.Header)
		}
	}
	if last != want[len(want)-1].Seq || last > wantLast {
		t.Fatalf("ReadHistory returned %d, want %d", last, want[len(want)-1].Seq)
	}

	// From a sequence on: only what follows it (now the late one too).
	mid := want[n/2].Seq
	var tail []uint64
	if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, filter, mid, func(m events.RawMsg) error {
		tail = append(tail, m.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(tail) != n-n/2+1 || tail[0] <= mid {
		t.Fatalf("read after %d: %d messages from %v, want %d", mid, len(tail), tail[:1], n-n/2+1)
	}

	// Nothing stored (after the end, or no such aggregate): no call, after back.
	for _, c := range []struct {
		filter string
		after  uint64
	}{{filter, tail[len(tail)-1]}, {events.SubjectFilter("run", "nosuch"), 0}, {events.SubjectFilter("run", "nosuch"), 7}} {
		calls := 0
		last, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, c.filter, c.after, func(events.RawMsg) error { calls++; return nil })
		if err != nil || calls != 0 || last != c.after {
			t.Fatalf("read %s after %d: %d calls, last %d, err %v; want none, %d, nil", c.filter, c.after, calls, last, err, c.after)
		}
	}
	if c := consumers(); c != before {
		t.Fatalf("%d consumers after the reads, %d before", c, before)
	}

	// A read after the aggregate's last message asks for its last message
	// only: a read by subject from there would walk to the end of the log.
	requests, err := bus.JetStream().Conn().SubscribeSync("$JS.API.DIRECT.GET." + events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := bus.Publish(ctx, newEvent(t, events.RunStepFailed, "rb", fmt.Sprintf("rb/after%d", i), stepFailedData)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, filter, tail[len(tail)-1], func(events.RawMsg) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := bus.JetStream().Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	var asked []string
	for {
		m, err := requests.NextMsg(50 * time.Millisecond)
		if err != nil {
			break
		}
		asked = append(asked, string(m.Data))
	}
	if len(asked) != 1 || !strings.Contains(asked[0], "last_by_subj") {
		t.Fatalf("a read after the last message asked %q; want the last message only", asked)
	}
}

// TestReadSeqs reads an aggregate's messages by their sequences, more
// than one window of requests in flight: the same messages, headers and
// times as ReadLog, in order. A sequence that is another aggregate's, or a
// message deleted since, ends the read with ErrSeqsChanged before fn sees
// anything after it; a stream that is not there is unavailable.
func TestReadSeqs(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := testCtx(t)
	const n = 300
	for i := range n {
		for _, agg := range []string{"ra", "rb"} {
			if _, err := bus.Publish(ctx, newEvent(t, events.RunStepFailed, agg, fmt.Sprintf("%s/%d", agg, i), stepFailedData)); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(filter string) []events.RawMsg {
		var out []events.RawMsg
		if _, err := events.ReadLog(ctx, bus.JetStream(), events.EventStream, []string{filter}, 0, func(m events.RawMsg) error {
			out = append(out, m)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, other := read(events.SubjectFilter("run", "ra")), read(events.SubjectFilter("run", "rb"))
	seqs := make([]uint64, len(want))
	for i, m := range want {
		seqs[i] = m.Seq
	}
	filter := events.SubjectFilter("run", "ra")
	var got []events.RawMsg
	if err := events.ReadSeqs(ctx, bus.JetStream(), events.EventStream, filter, seqs, func(m events.RawMsg) error {
		got = append(got, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("ReadSeqs read %d messages, want %d", len(got), n)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Subject != w.Subject || string(g.Data) != string(w.Data) || !g.Stored.Equal(w.Stored) {
			t.Fatalf("message %d: got seq %d %s at %v, want seq %d %s at %v", i, g.Seq, g.Subject, g.Stored, w.Seq, w.Subject, w.Stored)
		}
		if len(g.Header) != len(w.Header) {
			t.Fatalf("message %d: headers %v, want %v", i, g.Header, w.Header)
		}
		for k, v := range w.Header {
			if !slices.Equal(g.Header[k], v) {
				t.Fatalf("message %d: header %s = %q, want %q", i, k, g.Header[k], v)
			}
		}
	}

	changed := func(name string, seqs []uint64, wantCalls int) {
		t.Helper()
		calls := 0
		err := events.ReadSeqs(ctx, bus.JetStream(), events.EventStream, filter, seqs, func(events.RawMsg) error { calls++; return nil })
		if !errors.Is(err, events.ErrSeqsChanged) || calls != wantCalls {
			t.Fatalf("%s: %d calls, err %v; want %d calls and ErrSeqsChanged", name, calls, err, wantCalls)
		}
	}
	// Another aggregate's message in the middle.
	mixed := slices.Clone(seqs[:100])
	mixed[70] = other[69].Seq
	slices.Sort(mixed)
	at := slices.Index(mixed, other[69].Seq)
	changed("another aggregate's sequence", mixed, at)
	// A message deleted since.
	s, err := bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, seqs[150]); err != nil {
		t.Fatal(err)
	}
	changed("a deleted message", seqs, 150)

	err = events.ReadSeqs(ctx, bus.JetStream(), "NOSUCH", filter, seqs[:3], func(events.RawMsg) error { return nil })
	if events.CodeOf(err) != events.CodeUnavailable {
		t.Fatalf("read from a stream that is not there: %v; want unavailable", err)
	}
}

// TestReadHistoryNeverShort: a stream that is not there, or one that does
// not answer in time, is an error, never an empty history.
func TestReadHistoryNeverShort(t *testing.T) {
	env := eventstest.Start(t)
	nc, err := nats.Connect(env.URL(), nats.Timeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	bus, err := events.NewBus(nc, env.Codec)
	if err != nil {
		t.Fatal(err)
	}
	// A responder that never answers.
	silent, err := env.Conn(t).SubscribeSync("$JS.API.DIRECT.GET.SILENT")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	for _, stream := range []string{"NOSUCH", "SILENT"} {
		calls := 0
		_, err := events.ReadHistory(context.Background(), bus.JetStream(), stream, "heed.run.x.>", 0, func(events.RawMsg) error { calls++; return nil })
		if events.CodeOf(err) != events.CodeUnavailable || calls != 0 {
			t.Errorf("read from %s: %d calls, err %v; want an unavailable error", stream, calls, err)
		}
	}
}

// TestLastOfEach reads the last message of each of many literal subjects
// across several requests: only the subjects that have one come back, each
// once with its last message, and a read of none finds nothing. Each
// request costs the reader far less than the 512 KB a synchronous
// subscription's channel would (jetstreamext's GetLastMsgsFor).
func TestLastOfEach(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := testCtx(t)
	const n = 700 // three requests
	var subjects []string
	want := map[string]string{} // subject -> id of its last message
	for i := range n {
		agg := fmt.Sprintf("r%03d", i)
		subjects = append(subjects, events.RunStepFailed.Subject(agg))
		if i%100 != 7 {
			continue
		}
		for k := range 2 {
			id := fmt.Sprintf("%s/%d", agg, k)
			if _, err := bus.Publish(ctx, newEvent(t, events.RunStepFailed, agg, id, stepFailedData)); err != nil {
				t.Fatal(err)
			}
			want[events.RunStepFailed.Subject(agg)] = id
		}
	}
	got, err := events.LastOfEach(ctx, bus.JetStream(), events.EventStream, subjects)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d messages, want %d", len(got), len(want))
	}
	for _, m := range got {
		ev, err := bus.Codec().DecodeStored(m)
		if err != nil {
			t.Fatal(err)
		}
		if want[m.Subject] != ev.ID() {
			t.Fatalf("%s: got %s, want %s", m.Subject, ev.ID(), want[m.Subject])
		}
		delete(want, m.Subject)
	}
	none, err := events.LastOfEach(ctx, bus.JetStream(), events.EventStream, subjects[:5])
	if err != nil || len(none) != 0 {
		t.Fatalf("subjects with no message: %d messages, %v", len(none), err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const reads = 10
	for range reads {
		if _, err := events.LastOfEach(ctx, bus.JetStream(), events.EventStream, subjects[:256]); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	t.Logf("per request %d KB", (after.TotalAlloc-before.TotalAlloc)/reads>>10)
	if per := (after.TotalAlloc - before.TotalAlloc) / reads; per > 256<<10 {
		t.Fatalf("a request of 256 subjects allocated %d KB, want far less than a 512 KB channel", per>>10)
	}
}

// TestLastOfEachPastMaxBytes: the server stops a multi-last batch at its
// max_bytes (LastOfEach asks for 4 MB) and says how many it left;
// LastOfEach asks for the rest, so every subject with a message comes back
// once, with its last message.
func TestLastOfEachPastMaxBytes(t *testing.T) {
	env := eventstest.Start(t)
	js := env.Bus(t).JetStream()
	ctx := testCtx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 40<<10) // 256 last messages: 10 MB, three batches
	var subjects []string
	for i := range 256 {
		subj := fmt.Sprintf("big.%d", i)
		subjects = append(subjects, subj)
		for range 2 {
			if _, err := js.Publish(ctx, subj, body); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := events.LastOfEach(ctx, js, "BIG", subjects)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range got {
		if seen[m.Subject] {
			t.Fatalf("%s came back twice", m.Subject)
		}
		seen[m.Subject] = true
		if m.Seq%2 != 0 {
			t.Fatalf("%s: seq %d is not its last message", m.Subject, m.Seq)
		}
	}
	if len(seen) != len(subjects) {
		t.Fatalf("%d of %d subjects came back (a batch stops at 4 MB)", len(seen), len(subjects))
	}
}
