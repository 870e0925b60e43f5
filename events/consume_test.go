package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// badMsg is one kind of message the gate must refuse.
type badMsg struct {
	name   string
	msg    func(t *testing.T) *nats.Msg
	code   events.Code
	reason string // the dead letter's reason must mention it
}

var badMsgs = []badMsg{
	{"garbage without headers", func(*testing.T) *nats.Msg {
		return &nats.Msg{Subject: "heed.run.bad-garbage.started", Data: []byte("\x00\x01 this is not an event \xff")}
	}, events.CodeUndecodable, "no CloudEvents headers"},
	{"binary mode without ce-type", func(t *testing.T) *nats.Msg {
		m := rawMsg(t, newEvent(t, events.RunStarted, "bad-notype", "bad-notype:1", runStartedData))
		delete(m.Header, "ce-type")
		return m
	}, events.CodeMissingAttribute, "type"},
	{"unknown ce-type", func(t *testing.T) *nats.Msg {
		return rawMsg(t, newEvent(t, "heed.run.exploded", "bad-unknown", "bad-unknown:1", runStartedData))
	}, events.CodeUnknownType, "heed.run.exploded"},
	{"schema violation", func(t *testing.T) *nats.Msg {
		return rawMsg(t, newEvent(t, events.RunStarted, "bad-schema", "bad-schema:1", json.RawMessage(`{"skill":"deploy"}`)))
	}, events.CodeSchemaViolation, "driver"},
	{"subject mismatch", func(t *testing.T) *nats.Msg {
		m := rawMsg(t, newEvent(t, events.RunStarted, "bad-victim", "bad-mismatch:1", runStartedData))
		m.Subject = "heed.run.bad-mismatch.started" // someone else's aggregate
		return m
	}, events.CodeSubjectMismatch, "heed.run.bad-victim.started"},
	{"invalid aggregate id", func(t *testing.T) *nats.Msg {
		m := rawMsg(t, newEvent(t, events.RunStarted, "bad-id", "bad-id:1", runStartedData))
		m.Header.Set("ce-subject", "bad%20id")
		return m
	}, events.CodeInvalidID, `"bad id"`},
}

// TestConsumeDeadLettersBadMessages publishes every kind of bad message,
// each followed by a good event, with a plain JetStream client; the
// consumer must dead-letter the bad ones intact and handle exactly the good.
func TestConsumeDeadLettersBadMessages(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := jsOf(t, env)

	type published struct {
		msg *nats.Msg
		seq uint64
	}
	bad := make([]published, len(badMsgs))
	var wantGood []string
	for i, b := range badMsgs {
		m := b.msg(t)
		bad[i] = published{m, publishRaw(t, js, m)}
		good := newEvent(t, events.RunStepFailed, fmt.Sprintf("good%d", i), fmt.Sprintf("good-%d", i), stepFailedData)
		publishRaw(t, js, rawMsg(t, good))
		wantGood = append(wantGood, good.ID())
	}

	var rec recorder
	c := consume(t, bus, events.ConsumerConfig{Name: "gate"}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		rec.add(d.Event.ID())
		return nil, nil
	})
	waitIdle(t, js, "gate")

	if got := rec.seen(); strings.Join(got, ",") != strings.Join(wantGood, ",") {
		t.Fatalf("handler saw %v, want exactly the good events %v in order", got, wantGood)
	}
	if s := c.Stats(); s.Handled != uint64(len(wantGood)) || s.DeadLettered != uint64(len(badMsgs)) || s.Retried != 0 {
		t.Errorf("stats = %+v, want %d handled, %d dead-lettered, 0 retried", s, len(wantGood), len(badMsgs))
	}
	if n := streamCount(t, js, events.DLQStream, ">"); n != uint64(len(badMsgs)) {
		t.Errorf("DLQ holds %d messages, want %d", n, len(badMsgs))
	}

	for i, b := range badMsgs {
		t.Run(b.name, func(t *testing.T) {
			orig := bad[i]
			dlqSubject := "heed.dlq." + strings.TrimPrefix(orig.msg.Subject, "heed.")
			if got := events.DLQSubject(orig.msg.Subject); got != dlqSubject {
				t.Fatalf("DLQSubject(%s) = %s, want %s", orig.msg.Subject, got, dlqSubject)
			}
			dl := lastMsg(t, js, events.DLQStream, dlqSubject)
			checkDeadLetter(t, dl, orig.msg, orig.seq, "gate", b.code, b.reason)
		})
	}
}

// checkDeadLetter asserts a dead letter carries the original intact plus
// the reason headers.
func checkDeadLetter(t *testing.T, dl *jetstream.RawStreamMsg, orig *nats.Msg, seq uint64, consumer string, code events.Code, reasonHas string) {
	t.Helper()
	h := dl.Header
	if got := h.Get(events.HeaderDLQCode); got != string(code) {
		t.Errorf("%s = %q, want %q", events.HeaderDLQCode, got, code)
	}
	reason := h.Get(events.HeaderDLQReason)
	if reason == "" {
		t.Errorf("%s is empty", events.HeaderDLQReason)
	}
	if strings.ContainsAny(reason, "\r\n\x00") {
		t.Errorf("%s has control characters: %q", events.HeaderDLQReason, reason)
	}
	if !strings.Contains(reason, reasonHas) {
		t.Errorf("%s = %q, want it to mention %q", events.HeaderDLQReason, reason, reasonHas)
	}
	for name, want := range map[string]string{
		events.HeaderDLQStream:   events.EventStream,
		events.HeaderDLQSeq:      strconv.FormatUint(seq, 10),
		events.HeaderDLQSubject:  orig.Subject,
		events.HeaderDLQConsumer: consumer,
		events.HeaderMsgID:       fmt.Sprintf("dlq:%s:%d", events.EventStream, seq),
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if ts, err := time.Parse(time.RFC3339Nano, h.Get(events.HeaderDLQTime)); err != nil || time.Since(ts) > time.Minute {
		t.Errorf("%s = %q: not a recent RFC 3339 time (%v)", events.HeaderDLQTime, h.Get(events.HeaderDLQTime), err)
	}
	if string(dl.Data) != string(orig.Data) {
		t.Errorf("body = %q, want the original %q", dl.Data, orig.Data)
	}
	for name, vals := range orig.Header {
		switch {
		case strings.HasPrefix(strings.ToLower(name), "nats-"):
			// Control headers must not act again on the DLQ stream.
			if got := h.Get("Heed-Orig-" + name); got != vals[0] {
				t.Errorf("Heed-Orig-%s = %q, want %q", name, got, vals[0])
			}
		default:
			if got := h[name]; len(got) != len(vals) || got[0] != vals[0] {
				t.Errorf("original header %s = %q, dead letter has %q", name, vals, got)
			}
		}
	}
}

func TestConsumeRetriesThenDeadLetters(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()

	flaky := newEvent(t, events.RunStepFailed, "flaky", "flaky-1", stepFailedData)
	broken := newEvent(t, events.RunStepFailed, "broken", "broken-1", stepFailedData)
	publish(t, bus, broken)
	brokenSeq := lastMsg(t, js, events.EventStream, events.SubjectOf(broken)).Sequence
	publish(t, bus, flaky)

	const maxDeliver = 3
	var mu sync.Mutex
	attempts := map[string][]uint64{} // event id -> Delivered of each attempt
	c := consume(t, bus, events.ConsumerConfig{
		Name:       "retrier",
		MaxDeliver: maxDeliver,
		Backoff:    []time.Duration{10 * time.Millisecond, 20 * time.Millisecond},
		Workers:    2,
	}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		mu.Lock()
		attempts[d.Event.ID()] = append(attempts[d.Event.ID()], d.Delivered)
		n := len(attempts[d.Event.ID()])
		mu.Unlock()
		switch {
		case d.Event.ID() == broken.ID():
			return nil, errors.New("database is on fire")
		case n < 3: // flaky succeeds on its third attempt
			return nil, fmt.Errorf("transient failure %d", n)
		}
		return nil, nil
	})
	waitIdle(t, js, "retrier")
	eventstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if s := c.Stats(); s.Handled != 1 || s.DeadLettered != 1 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})

	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(attempts[broken.ID()]); got != "[1 2 3]" {
		t.Errorf("broken event deliveries = %s, want [1 2 3] (MaxDeliver %d)", got, maxDeliver)
	}
	if got := fmt.Sprint(attempts[flaky.ID()]); got != "[1 2 3]" {
		t.Errorf("flaky event deliveries = %s, want [1 2 3]", got)
	}
	if s := c.Stats(); s.Retried != 4 {
		t.Errorf("retried = %d, want 4 (2 per event)", s.Retried)
	}
	if n := streamCount(t, js, events.DLQStream, ">"); n != 1 {
		t.Fatalf("DLQ holds %d messages, want 1 (only the broken event)", n)
	}
	orig, err := bus.Codec().Encode(broken)
	if err != nil {
		t.Fatal(err)
	}
	dl := lastMsg(t, js, events.DLQStream, events.DLQSubject(events.SubjectOf(broken)))
	checkDeadLetter(t, dl, orig, brokenSeq, "retrier", events.CodeHandlerFailed, "database is on fire")
	if r := dl.Header.Get(events.HeaderDLQReason); !strings.Contains(r, "3 times") {
		t.Errorf("reason %q does not say how often it failed", r)
	}
}

func TestConsumePoisonDeadLettersAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func() ([]events.Event, error)
		reason  string
	}{
		{"Poison", func() ([]events.Event, error) {
			return nil, events.Poison(errors.New("step index out of range"))
		}, "step index out of range"},
		{"wrapped Poison", func() ([]events.Event, error) {
			return nil, fmt.Errorf("apply: %w", events.Poison(errors.New("bad state")))
		}, "bad state"},
		{"panic", func() ([]events.Event, error) {
			panic("nil map write")
		}, "nil map write"},
		{"invalid output event", func() ([]events.Event, error) {
			bad, _ := events.NewEvent(events.RunResumed, "r1", "out-1", testSource, json.RawMessage(`{"step":"deploy"}`))
			return []events.Event{bad}, nil
		}, "invalid event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := eventstest.Start(t)
			bus := env.Bus(t)
			js := bus.JetStream()
			in := newEvent(t, events.ConfirmAnswered, "c1", "answer:c1", answeredData)
			seq := publish(t, bus, in).Sequence

			var calls atomic.Int32
			c := consume(t, bus, events.ConsumerConfig{Name: "poisoned", MaxDeliver: 5, Backoff: []time.Duration{10 * time.Millisecond}},
				func(context.Context, *events.Delivery) ([]events.Event, error) {
					calls.Add(1)
					return tc.handler()
				})
			waitIdle(t, js, "poisoned")
			if n := calls.Load(); n != 1 {
				t.Errorf("handler called %d times, want 1", n)
			}
			if s := c.Stats(); s.DeadLettered != 1 || s.Retried != 0 || s.Handled != 0 {
				t.Errorf("stats = %+v, want 1 dead-lettered, no retry", s)
			}
			orig, _ := bus.Codec().Encode(in)
			dl := lastMsg(t, js, events.DLQStream, "heed.dlq.confirm.c1.answered")
			checkDeadLetter(t, dl, orig, seq, "poisoned", events.CodePoison, tc.reason)
			if n := streamCount(t, js, events.EventStream, "heed.run.>"); n != 0 {
				t.Errorf("%d output events stored, want none", n)
			}
		})
	}
}

// TestConsumeInvalidOutputPublishesNothing: when one of a handler's
// outputs is invalid the input is poison, and none of its outputs may
// reach the log, not even the valid ones.
func TestConsumeInvalidOutputPublishesNothing(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	publish(t, bus, newEvent(t, events.ConfirmAnswered, "c1", "answer:c1", answeredData))

	c := consume(t, bus, events.ConsumerConfig{Name: "half", Filters: []string{"heed.confirm.>"}}, func(context.Context, *events.Delivery) ([]events.Event, error) {
		var out []events.Event
		for i, data := range []json.RawMessage{resumedData, resumedData, json.RawMessage(`{}`)} {
			ev, _ := events.NewEvent(events.RunResumed, fmt.Sprintf("r%d", i), fmt.Sprintf("out-%d", i), testSource, data)
			out = append(out, ev)
		}
		return out, nil
	})
	waitIdle(t, js, "half")
	if s := c.Stats(); s.DeadLettered != 1 {
		t.Fatalf("stats = %+v, want the input dead-lettered", s)
	}
	// The consumer publishes on bus's connection, and only before it
	// dead-letters the input. A marker published on that same connection
	// now is stored after anything it published (one connection, one
	// stream: in order), so once the marker's publish is acknowledged the
	// count is final.
	marker := newEvent(t, events.RunResumed, "marker", "marker-1", resumedData)
	publish(t, bus, marker)
	if n := streamCount(t, js, events.EventStream, "heed.run.>"); n != 1 {
		t.Fatalf("%d outputs of a poisoned input were stored, want 0", n-1)
	}
}

// TestConsumeOutputsDeterministicIDs: outputs are published before the
// input is acknowledged; two consumers (or one redelivery) handling the same
// input publish outputs with the same ids, which the stream stores once.
func TestConsumeOutputsDeterministicIDs(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()

	handler := func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		var out []events.Event
		for i, run := range []string{"r1", "r2"} {
			ev, err := events.NewEvent(events.RunResumed, run, fmt.Sprintf("resume:%s:%d", d.Event.ID(), i), "urn:heed:runner", resumedData)
			if err != nil {
				return nil, err
			}
			ev.SetTime(d.Event.Time())
			out = append(out, ev)
		}
		return out, nil
	}
	filter := []string{"heed.confirm.*.answered"}
	for _, name := range []string{"runner-a", "runner-b"} {
		consume(t, env.Bus(t), events.ConsumerConfig{Name: name, Filters: filter}, handler)
	}
	for i := range 3 {
		publish(t, bus, newEvent(t, events.ConfirmAnswered, fmt.Sprintf("c%d", i), fmt.Sprintf("answer-%d", i), answeredData))
	}
	waitIdle(t, js, "runner-a")
	waitIdle(t, js, "runner-b")

	for _, run := range []string{"r1", "r2"} {
		if n := streamCount(t, js, events.EventStream, "heed.run."+run+".resumed"); n != 3 {
			t.Errorf("%d resumed events for %s, want 3 (one per input, not one per consumer)", n, run)
		}
	}
	// The outputs are valid events whose ids derive from the input.
	m := lastMsg(t, js, events.EventStream, "heed.run.r2.resumed")
	ev, err := bus.Codec().Decode(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	if err != nil {
		t.Fatalf("stored output does not decode: %v", err)
	}
	if ev.ID() != "resume:answer-2:1" {
		t.Errorf("last output id = %s, want resume:answer-2:1", ev.ID())
	}
}

func TestDeliveryHold(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()

	held := make(chan func([]events.Event, error), 1)
	var calls atomic.Int32
	// A short ack wait, so that the hold is seen to outlast it: a held
	// delivery is kept in progress every third of the ack wait (at least
	// every 50 ms), here every 100 ms.
	const ackWait = 300 * time.Millisecond
	progress := progressAcks(t, env, "holder")
	c := consume(t, bus, events.ConsumerConfig{Name: "holder", Filters: []string{"heed.confirm.>"}, AckWait: ackWait}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		calls.Add(1)
		done := d.Hold()
		held <- done
		return nil, errors.New("ignored: the delivery is held") // a held delivery's return value must not count
	})
	seq := publish(t, bus, newEvent(t, events.ConfirmAnswered, "c1", "answer:c1", answeredData)).Sequence

	var done func([]events.Event, error)
	select {
	case done = <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never ran")
	}
	// While held, the input stays unacknowledged and is not redelivered,
	// well past the ack wait: wait until the consumer has told the server
	// 4 times (over 400 ms, more than the 300 ms ack wait) that it is in
	// progress, then look.
	waitProgress(t, progress, 0, 4)
	ci := consumerInfo(t, js, "holder")
	if ci.NumAckPending != 1 || ci.AckFloor.Stream >= seq || ci.NumRedelivered != 0 {
		t.Fatalf("while held: %d unacknowledged, %d redelivered, ack floor %d; want 1 unacknowledged below seq %d, none redelivered", ci.NumAckPending, ci.NumRedelivered, ci.AckFloor.Stream, seq)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("while held: handler called %d times, want 1", n)
	}
	if s := c.Stats(); s.Handled != 0 || s.Retried != 0 || s.DeadLettered != 0 {
		t.Fatalf("while held: stats %+v, want all zero", s)
	}

	out, _ := events.NewEvent(events.RunResumed, "r1", "resume:answer:c1", testSource, resumedData)
	done([]events.Event{out}, nil)
	waitIdle(t, js, "holder")
	if ci := consumerInfo(t, js, "holder"); ci.AckFloor.Stream < seq {
		t.Errorf("after finishing: ack floor %d, want >= %d", ci.AckFloor.Stream, seq)
	}
	if n := streamCount(t, js, events.EventStream, "heed.run.r1.resumed"); n != 1 {
		t.Errorf("held delivery's output stored %d times, want 1", n)
	}
	if s := c.Stats(); s.Handled != 1 || s.Retried != 0 {
		t.Errorf("stats = %+v, want 1 handled", s)
	}
	// Finishing twice is harmless.
	done(nil, errors.New("second finish"))
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
	if s := c.Stats(); s.Handled != 1 || s.Retried != 0 || s.DeadLettered != 0 {
		t.Errorf("after a second finish: stats = %+v", s)
	}
}

// TestConsumeOrder: MaxAckPending 1 gives strict log order; with several
// workers each aggregate's events still arrive in log order. Both must keep
// up: a stalled pull shows up as a missed deadline.
func TestConsumeOrder(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	const n = 300
	evs := make([]events.Event, 0, n)
	for i := range n {
		evs = append(evs, *newEvent(t, events.RunStepFailed, fmt.Sprintf("agg%d", i%5), fmt.Sprintf("ord-%d", i), stepFailedData))
	}
	if err := bus.PublishAll(testCtx(t), evs); err != nil {
		t.Fatal(err)
	}

	type seen struct {
		agg string
		seq uint64
	}
	for _, tc := range []struct {
		name          string
		maxAckPending int
		workers       int
		global        bool // strict order across aggregates
	}{
		{"strict", 1, 1, true},
		{"partitioned", 0, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []seen
			start := time.Now()
			c := consume(t, env.Bus(t), events.ConsumerConfig{Name: "order-" + tc.name, MaxAckPending: tc.maxAckPending, Workers: tc.workers},
				func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
					mu.Lock()
					got = append(got, seen{d.Event.Subject(), d.Seq})
					mu.Unlock()
					return nil, nil
				})
			eventstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
				if h := c.Stats().Handled; h != n {
					return fmt.Errorf("handled %d of %d", h, n)
				}
				return nil
			})
			t.Logf("%d events in %s", n, time.Since(start).Round(time.Millisecond))
			mu.Lock()
			defer mu.Unlock()
			last := map[string]uint64{}
			var prev uint64
			for _, s := range got {
				if tc.global && s.seq <= prev {
					t.Fatalf("seq %d handled after seq %d", s.seq, prev)
				}
				if s.seq <= last[s.agg] {
					t.Fatalf("%s: seq %d handled after seq %d", s.agg, s.seq, last[s.agg])
				}
				prev, last[s.agg] = s.seq, s.seq
			}
			if len(got) != n {
				t.Fatalf("handler called %d times, want %d", len(got), n)
			}
		})
	}
}

// TestDeadLetterOncePerMessage: two consumers refusing the same stored
// message produce one dead letter (its id is dlq:<stream>:<seq>).
func TestDeadLetterOncePerMessage(t *testing.T) {
	env := eventstest.Start(t)
	js := jsOf(t, env)
	seq := publishRaw(t, js, &nats.Msg{Subject: "heed.run.x.started", Data: []byte("garbage")})

	var consumers []*events.Consumer
	for _, name := range []string{"indexer", "runner"} {
		consumers = append(consumers, consume(t, env.Bus(t), events.ConsumerConfig{Name: name}, func(context.Context, *events.Delivery) ([]events.Event, error) {
			t.Errorf("handler called for garbage")
			return nil, nil
		}))
	}
	for _, name := range []string{"indexer", "runner"} {
		waitIdle(t, js, name)
	}
	for i, c := range consumers {
		if s := c.Stats(); s.DeadLettered != 1 {
			t.Errorf("consumer %d: dead-lettered %d, want 1", i, s.DeadLettered)
		}
	}
	if n := streamCount(t, js, events.DLQStream, ">"); n != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", n)
	}
	dl := lastMsg(t, js, events.DLQStream, "heed.dlq.run.x.started")
	if got, want := dl.Header.Get(events.HeaderMsgID), fmt.Sprintf("dlq:%s:%d", events.EventStream, seq); got != want {
		t.Errorf("dead letter id = %q, want %q", got, want)
	}
}

func TestDLQSubject(t *testing.T) {
	for in, want := range map[string]string{
		"heed.run.r1.step.failed":  "heed.dlq.run.r1.step.failed",
		"heed.confirm.c1.answered": "heed.dlq.confirm.c1.answered",
		"other.thing":              "heed.dlq.other.other.thing",
	} {
		if got := events.DLQSubject(in); got != want {
			t.Errorf("DLQSubject(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDeadLetterMessageHeaderSafety(t *testing.T) {
	dl := events.DeadLetter{
		Subject: "heed.run.r1.started",
		Header: nats.Header{
			"Nats-Msg-Id":                         {"orig"},
			"Nats-Expected-Last-Subject-Sequence": {"7"},
			"ce-id":                               {"e1"},
		},
		Data:   []byte("x"),
		Stream: events.EventStream, Seq: 9, Consumer: "c", Code: events.CodeSchemaViolation,
		Reason: "line one\r\nline two\x00" + strings.Repeat("é", 3000),
	}
	m := dl.Message(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	if got := m.Header.Get("Nats-Expected-Last-Subject-Sequence"); got != "" {
		t.Errorf("original control header survived: Nats-Expected-Last-Subject-Sequence = %q", got)
	}
	if got := m.Header.Get("Heed-Orig-Nats-Expected-Last-Subject-Sequence"); got != "7" {
		t.Errorf("renamed control header = %q, want 7", got)
	}
	if got := m.Header.Get(events.HeaderMsgID); got != "dlq:HEED_EVENTS:9" {
		t.Errorf("Nats-Msg-Id = %q", got)
	}
	r := m.Header.Get(events.HeaderDLQReason)
	if strings.ContainsAny(r, "\r\n\x00") {
		t.Errorf("reason has control characters: %q", r)
	}
	if !strings.HasPrefix(r, "line one  line two ") {
		t.Errorf("reason = %.40q…", r)
	}
	if len(r) > 2100 {
		t.Errorf("reason is %d bytes, want it bounded", len(r))
	}
	// The original header map is not modified.
	if dl.Header.Get("Nats-Msg-Id") != "orig" || len(dl.Header) != 3 {
		t.Errorf("Message modified the original headers: %v", dl.Header)
	}
}

// TestConsumeDeadLettersWhatNeverFinishes: an input whose handler never
// finishes because its process dies (here each consumer instance is
// abandoned holding it, as a crashed or killed process leaves it) comes
// back to the next instance after the ack wait; past MaxDeliver it is
// dead-lettered before any handler sees it again, so it cannot crash a
// service in a loop. A redelivery to the process that still holds the
// input (a backlog, a slow handler) is not such a crash.
func TestConsumeDeadLettersWhatNeverFinishes(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	bomb := newEvent(t, events.RunStepFailed, "bomb", "bomb-1", stepFailedData)
	publish(t, bus, bomb)
	seq := lastMsg(t, js, events.EventStream, events.SubjectOf(bomb)).Sequence

	const maxDeliver = 3
	calls := make(chan uint64, 16)
	cfg := events.ConsumerConfig{Name: "crashy", MaxDeliver: maxDeliver, AckWait: 150 * time.Millisecond}
	progress := progressAcks(t, env, "crashy")
	handler := func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		d.Hold() // never finished: the process "dies" holding it
		calls <- d.Delivered
		return nil, nil
	}
	crashed, cancel := context.WithCancel(context.Background())
	cancel()
	var got []uint64
	for life := 1; life <= maxDeliver; life++ {
		c, err := events.Consume(testCtx(t), bus, cfg, handler)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-calls:
			got = append(got, n)
		case <-time.After(10 * time.Second):
			t.Fatalf("life %d: the input was not delivered", life)
		}
		// Held, it stays with this process past several ack waits: the
		// consumer keeps telling the server it is in progress (every 50 ms,
		// a third of the ack wait); wait for 8 of those, over 400 ms, more
		// than two ack waits.
		waitProgress(t, progress, progress.Load(), 8)
		if len(calls) != 0 || streamCount(t, js, events.DLQStream, ">") != 0 {
			t.Fatalf("life %d: a held input was redelivered or dead-lettered while its process lived", life)
		}
		c.Stop(crashed) // the crash: nothing acknowledged, nothing finished
	}
	// The next life never sees it: it is dead-lettered first.
	c := consume(t, bus, cfg, handler)
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := streamCount(t, js, events.DLQStream, ">"); n != 1 {
			return fmt.Errorf("DLQ holds %d messages", n)
		}
		return nil
	})
	for len(calls) > 0 {
		if n := <-calls; n > uint64(maxDeliver) {
			got = append(got, n)
		}
	}
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("handlers saw deliveries %v, want [1 2 3]: never a fourth life", got)
	}
	orig, err := bus.Codec().Encode(bomb)
	if err != nil {
		t.Fatal(err)
	}
	dl := lastMsg(t, js, events.DLQStream, events.DLQSubject(events.SubjectOf(bomb)))
	checkDeadLetter(t, dl, orig, seq, "crashy", events.CodeUnfinished, "never finished")
	if s := c.Stats(); s.DeadLettered != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestConsumeServerFilter: a consumer of several subjects with one
// covering ServerFilter asks the server for that one filter (its
// several-filter path walks every subject of a block per message) and
// acknowledges what falls outside its filters without handling or
// dead-lettering it, even garbage; it handles exactly its events, in log
// order. A ServerFilter that does not cover the filters is refused.
func TestConsumeServerFilter(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := jsOf(t, env)

	var want []string
	for i := range 20 {
		agg := fmt.Sprintf("filt%d", i)
		if i%2 == 0 {
			ev := newEvent(t, events.RunStepFailed, agg, agg+"-failed", stepFailedData)
			publishRaw(t, js, rawMsg(t, ev))
			want = append(want, ev.ID())
		}
		// Outside the filters: another type of the same kind, and garbage
		// that would be dead-lettered if it were handed to the gate.
		publishRaw(t, js, rawMsg(t, newEvent(t, events.RunStarted, agg, agg+"-started", runStartedData)))
		publishRaw(t, js, &nats.Msg{Subject: "heed.run." + agg + ".started", Data: []byte("not an event")})
	}
	var rec recorder
	filters := []string{"heed.run.*.step.failed", "heed.run.*.step.retried"}
	c := consume(t, bus, events.ConsumerConfig{Name: "filtered", Filters: filters, ServerFilter: "heed.run.>", MaxAckPending: 1}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		rec.add(d.Event.ID())
		return nil, nil
	})
	waitIdle(t, js, "filtered")

	info := consumerInfo(t, js, "filtered")
	if info.Config.FilterSubject != "heed.run.>" || len(info.Config.FilterSubjects) != 0 {
		t.Errorf("server filter = %q %v, want the one filter heed.run.>", info.Config.FilterSubject, info.Config.FilterSubjects)
	}
	if got := rec.seen(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("handler saw %v, want %v", got, want)
	}
	if s := c.Stats(); s.Handled != uint64(len(want)) || s.DeadLettered != 0 || s.Skipped != 40 {
		t.Errorf("stats = %+v, want %d handled, none dead-lettered, 40 skipped", s, len(want))
	}
	if n := streamCount(t, js, events.DLQStream, ">"); n != 0 {
		t.Errorf("DLQ holds %d messages, want none", n)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		t.Errorf("pending %d, ack pending %d: the skipped messages must be acknowledged", info.NumPending, info.NumAckPending)
	}

	// Every event subject (the default) gets heed.>.
	consume(t, bus, events.ConsumerConfig{Name: "all"}, func(context.Context, *events.Delivery) ([]events.Event, error) { return nil, nil })
	if f := consumerInfo(t, js, "all").Config.FilterSubject; f != "heed.>" {
		t.Errorf("default filters: server filter %q, want heed.>", f)
	}
	// Without a ServerFilter, the server filters by the filters.
	consume(t, bus, events.ConsumerConfig{Name: "several", Filters: filters}, func(context.Context, *events.Delivery) ([]events.Event, error) { return nil, nil })
	if f := consumerInfo(t, js, "several").Config.FilterSubjects; len(f) != 2 {
		t.Errorf("no server filter: server filters %v, want both", f)
	}
	consume(t, bus, events.ConsumerConfig{Name: "one", Filters: []string{"heed.run.>"}}, func(context.Context, *events.Delivery) ([]events.Event, error) { return nil, nil })
	if ci := consumerInfo(t, js, "one"); ci.Config.FilterSubject != "heed.run.>" || len(ci.Config.FilterSubjects) != 0 {
		t.Errorf("one filter: server filter %q %v, want heed.run.>", ci.Config.FilterSubject, ci.Config.FilterSubjects)
	}
	if _, err := events.Consume(testCtx(t), bus, events.ConsumerConfig{Name: "bad", Filters: filters, ServerFilter: "heed.confirm.>"}, func(context.Context, *events.Delivery) ([]events.Event, error) { return nil, nil }); err == nil {
		t.Error("a server filter that does not cover the filters was accepted")
	}
}

// A consumer whose server-side filter is wider than its filters — the
// configuration an older instance wrote when it started last, during a
// rolling upgrade — still hands its handler only its own subjects; the
// rest is acknowledged unhandled.
func TestConsumeServerFilterWidenedElsewhere(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := jsOf(t, env)
	var rec recorder
	filters := []string{"heed.run.*.step.failed", "heed.confirm.*.answered"}
	c := consume(t, bus, events.ConsumerConfig{Name: "widened", Filters: filters}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		rec.add(d.Event.ID())
		return nil, nil
	})
	cons, err := js.Consumer(testCtx(t), events.EventStream, "widened")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	cfg.FilterSubject, cfg.FilterSubjects = "heed.>", nil
	if _, err := js.UpdateConsumer(testCtx(t), events.EventStream, cfg); err != nil {
		t.Fatal(err)
	}
	mine := newEvent(t, events.RunStepFailed, "wide", "wide-failed", stepFailedData)
	publishRaw(t, js, rawMsg(t, newEvent(t, events.RunStarted, "wide", "wide-started", runStartedData)))
	publishRaw(t, js, rawMsg(t, mine))
	waitIdle(t, js, "widened")
	if got := rec.seen(); len(got) != 1 || got[0] != mine.ID() {
		t.Fatalf("handler saw %v, want only %s", got, mine.ID())
	}
	if s := c.Stats(); s.Skipped != 1 {
		t.Errorf("stats = %+v, want the other event skipped", s)
	}
}

// An event whose handler fails only because NATS or JetStream cannot be
// reached (a cluster's failover) is not dead-lettered after MaxDeliver
// deliveries: it gets UnavailableAllowance times as many, and is handled
// once JetStream answers again; past those it is dead-lettered too.
func TestConsumeUnavailableIsNotTheEventsFault(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	waits := newEvent(t, events.RunStepFailed, "waits", "waits-1", stepFailedData)
	never := newEvent(t, events.RunStepFailed, "never", "never-1", stepFailedData)
	publish(t, bus, waits)
	publish(t, bus, never)

	const maxDeliver = 2
	var mu sync.Mutex
	attempts := map[string]int{}
	c := consume(t, bus, events.ConsumerConfig{
		Name:       "patient",
		MaxDeliver: maxDeliver,
		Backoff:    []time.Duration{5 * time.Millisecond},
		Workers:    2,
	}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		mu.Lock()
		attempts[d.Event.ID()]++
		n := attempts[d.Event.ID()]
		mu.Unlock()
		if d.Event.ID() == never.ID() || n < 2*maxDeliver {
			return nil, events.Errorf(events.CodeUnavailable, "publish: %v", context.DeadlineExceeded)
		}
		return nil, nil
	})
	waitIdle(t, js, "patient")
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if s := c.Stats(); s.Handled != 1 || s.DeadLettered != 1 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if n := attempts[waits.ID()]; n != 2*maxDeliver {
		t.Errorf("the event that waited out the outage: %d deliveries, want %d (handled on the last)", n, 2*maxDeliver)
	}
	if n := attempts[never.ID()]; n != maxDeliver*events.UnavailableAllowance {
		t.Errorf("an outage that never ends: %d deliveries before the dead letter, want %d", n, maxDeliver*events.UnavailableAllowance)
	}
}

// TestConsumeHeldRedeliveryIsAdopted: the server redelivers an event this
// process still holds (its progress reports were lost, as when the
// consumer's leader moves to another node). The redelivery is not handled
// a second time — a handler seeing its own work running would return at
// once and the event be acknowledged, so a held call that then fails
// would never be redelivered — and the held work's outcome answers it: a
// failure is retried, a success acknowledges it.
func TestConsumeHeldRedeliveryIsAdopted(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	ev := newEvent(t, events.RunStepFailed, "held", "held-1", stepFailedData)
	publish(t, bus, ev)

	var mu sync.Mutex
	calls := 0
	var finish func([]events.Event, error)
	c := consume(t, bus, events.ConsumerConfig{
		Name:       "holder",
		AckWait:    300 * time.Millisecond,
		MaxDeliver: 3,
		Backoff:    []time.Duration{10 * time.Millisecond},
	}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			events.MuteProgress(d)
			finish = d.Hold()
		}
		return nil, nil
	})
	// Several ack waits pass: the server redelivers it (MaxDeliver times,
	// more than the crash-loop guard allows), and each is adopted.
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		cons, err := js.Consumer(testCtx(t), events.EventStream, "holder")
		if err != nil {
			return err
		}
		if n := cons.CachedInfo().Delivered.Consumer; n < 5 {
			return fmt.Errorf("delivered %d times, want the server to have redelivered it past MaxDeliver", n)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // room for a redelivery to have been handled
	mu.Lock()
	if calls != 1 {
		t.Fatalf("handler called %d times while the first delivery was held, want 1", calls)
	}
	mu.Unlock()
	if s := c.Stats(); s.DeadLettered != 0 {
		t.Fatalf("a held event was dead-lettered: %+v", s)
	}
	// The held work fails: the event comes back and is handled again.
	finish(nil, errors.New("tool result not stored"))
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls != 2 {
			return fmt.Errorf("handler called %d times, want 2 (the retry after the held work failed)", calls)
		}
		return nil
	})
	waitIdle(t, js, "holder")
	if s := c.Stats(); s.Handled != 1 || s.DeadLettered != 0 {
		t.Fatalf("stats %+v, want handled once on the retry", s)
	}
}

// Upgrading a consumer from one server filter to several, across a
// restart of the server (the runner's, from heed.> to its two subjects):
// the durable keeps its place and takes the new filters.
func TestConsumeFilterChangeAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	env := eventstest.StartIn(t, dir)
	bus := env.Bus(t)
	filters := []string{"heed.run.>", "heed.confirm.*.answered"}
	noop := func(context.Context, *events.Delivery) ([]events.Event, error) { return nil, nil }
	c, err := events.Consume(testCtx(t), bus, events.ConsumerConfig{Name: "upgraded", Filters: filters, ServerFilter: "heed.>", Logger: eventstest.Logger(t)}, noop)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, bus, newEvent(t, events.RunStepFailed, "up1", "up1-failed", stepFailedData))
	waitIdle(t, jsOf(t, env), "upgraded")
	stopConsumer(c)
	env.Server.Stop()

	env2 := eventstest.StartIn(t, dir)
	bus2 := env2.Bus(t)
	var rec recorder
	consume(t, bus2, events.ConsumerConfig{Name: "upgraded", Filters: filters}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		rec.add(d.Event.ID())
		return nil, nil
	})
	if f := consumerInfo(t, jsOf(t, env2), "upgraded").Config.FilterSubjects; len(f) != 2 {
		t.Fatalf("server filters after the upgrade: %v, want both", f)
	}
	publish(t, bus2, newEvent(t, events.RunStepFailed, "up2", "up2-failed", stepFailedData))
	waitIdle(t, jsOf(t, env2), "upgraded")
	if got := rec.seen(); len(got) != 1 || got[0] != "up2-failed" {
		t.Fatalf("handler saw %v after the upgrade, want only the new event", got)
	}
}

// TestConsumeGateHoldsDeliveriesBack: while the gate refuses (an instance
// paused past its lease), a delivery is neither handled nor acknowledged
// nor counted as a failure; once it allows, the server's redelivery after
// AckWait is handled, once, and nothing is dead-lettered.
func TestConsumeGateHoldsDeliveriesBack(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	var stale atomic.Bool
	stale.Store(true)
	var handled atomic.Int64
	var delivered atomic.Uint64
	var heldBack atomic.Pointer[string]
	c := consume(t, bus, events.ConsumerConfig{
		Name:     "gated",
		AckWait:  time.Second,
		HeldBack: func(subject string) { heldBack.Store(&subject) },
		Gate: func() error {
			if stale.Load() {
				return events.Errorf(events.CodeUnavailable, "not fresh")
			}
			return nil
		},
	}, func(_ context.Context, d *events.Delivery) ([]events.Event, error) {
		handled.Add(1)
		delivered.Store(d.Delivered)
		return nil, nil
	})
	publish(t, bus, newEvent(t, events.RunStepFailed, "gated", "gated-1", stepFailedData))
	time.Sleep(700 * time.Millisecond) // delivered, held back
	if n := handled.Load(); n != 0 {
		t.Fatalf("handled %d while the gate refused", n)
	}
	if s := heldBack.Load(); s == nil || *s != "heed.run.gated.step.failed" {
		t.Fatalf("HeldBack told %v, want the held-back delivery's subject", s)
	}
	cons, err := js.Consumer(context.Background(), events.EventStream, "gated")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := cons.Info(context.Background()); err != nil || info.NumAckPending != 1 {
		t.Fatalf("after the gate refused: %v, %+v; want one delivery waiting for its ack", err, info)
	}
	stale.Store(false)
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if s := c.Stats(); s.Handled != 1 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})
	if n, d := handled.Load(), delivered.Load(); n != 1 || d < 2 {
		t.Errorf("handled %d times, at delivery %d; want once, on a redelivery", n, d)
	}
	if s := c.Stats(); s.Retried != 0 || s.DeadLettered != 0 {
		t.Errorf("stats %+v: a held-back delivery is not a failure", s)
	}
	if n := streamCount(t, js, events.DLQStream, ">"); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

// TestConsumeGateIsNotACrashLoop: deliveries held back by the gate past
// MaxDeliver are not taken for a handler that never finished: nothing is
// dead-lettered or acknowledged while the gate refuses.
func TestConsumeGateIsNotACrashLoop(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	js := bus.JetStream()
	c := consume(t, bus, events.ConsumerConfig{
		Name: "gated-long", AckWait: 500 * time.Millisecond, MaxDeliver: 2,
		Gate: func() error { return events.Errorf(events.CodeUnavailable, "stale") },
	}, func(context.Context, *events.Delivery) ([]events.Event, error) {
		t.Error("handled while the gate refuses")
		return nil, nil
	})
	publish(t, bus, newEvent(t, events.RunStepFailed, "gated", "gated-long-1", stepFailedData))
	time.Sleep(3 * time.Second) // five or so redeliveries
	if s := c.Stats(); s.DeadLettered != 0 || s.Handled != 0 {
		t.Errorf("stats %+v", s)
	}
	if n := streamCount(t, js, events.DLQStream, ">"); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

// TestConsumeHeldBackAreNotTries: deliveries the gate held back do not
// count against a failing handler's MaxDeliver tries.
func TestConsumeHeldBackAreNotTries(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	var gated, tries atomic.Int64
	c := consume(t, bus, events.ConsumerConfig{
		Name: "held-then-failing", AckWait: 300 * time.Millisecond, MaxDeliver: 3,
		Backoff: []time.Duration{10 * time.Millisecond},
		Gate: func() error {
			if gated.Add(1) <= 2 {
				return events.Errorf(events.CodeUnavailable, "stale")
			}
			return nil
		},
	}, func(context.Context, *events.Delivery) ([]events.Event, error) {
		tries.Add(1)
		return nil, errors.New("always fails")
	})
	publish(t, bus, newEvent(t, events.RunStepFailed, "held", "held-1", stepFailedData))
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if s := c.Stats(); s.DeadLettered != 1 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})
	if n := tries.Load(); n != 3 {
		t.Errorf("the handler had %d tries before the dead letter, want MaxDeliver (3): two deliveries were held back", n)
	}
}
