package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
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

// fixedTime is the ce-time of every event the tests build, so encodings are
// byte-for-byte stable.
var fixedTime = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

const testSource = "urn:heed:test"

// Valid data for the types the tests use.
var (
	stepFailedData = json.RawMessage(`{"step":"fetch","index":2,"attempt":1,"error":{"message":"connection refused","kind":"network"}}`)
	runStartedData = json.RawMessage(`{"skill":"deploy","driver":"runner"}`)
	answeredData   = json.RawMessage(`{"choice":"yes","method":"user","by":"alice"}`)
	requestedData  = json.RawMessage(`{"message":"Deploy to prod?","options":[{"label":"Yes","value":"yes"},{"label":"No","value":"no"}],"requester":"runner"}`)
	resumedData    = json.RawMessage(`{"step":"deploy","index":3,"choice":"yes"}`)
)

var codecOnce = sync.OnceValues(func() (*events.Codec, error) {
	v, err := events.NewValidator()
	if err != nil {
		return nil, err
	}
	return events.NewCodec(v), nil
})

// testCodec is a codec over the real schemas.
func testCodec(t testing.TB) *events.Codec {
	t.Helper()
	c, err := codecOnce()
	if err != nil {
		t.Fatalf("validator: %v", err)
	}
	return c
}

// newEvent builds an event with the fixed time and test source.
func newEvent(t testing.TB, typ events.Type, aggregate, id string, data any) *events.Event {
	t.Helper()
	ev, err := events.NewEvent(typ, aggregate, id, testSource, data)
	if err != nil {
		t.Fatalf("NewEvent(%s, %s, %s): %v", typ, aggregate, id, err)
	}
	ev.SetTime(fixedTime)
	return &ev
}

// rawMsg encodes ev without validating it: the bytes a buggy or foreign
// producer could put on the wire.
func rawMsg(t testing.TB, ev *events.Event) *nats.Msg {
	t.Helper()
	m, err := events.EncodeUnchecked(ev)
	if err != nil {
		t.Fatalf("EncodeUnchecked(%s): %v", ev.ID(), err)
	}
	return m
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// jsOf returns a plain JetStream context on a new connection: the view of
// a client that knows nothing about heed.
func jsOf(t testing.TB, env *eventstest.Env) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(env.Conn(t))
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return js
}

// publishRaw stores m with a plain JetStream publish and returns its
// stream sequence.
func publishRaw(t testing.TB, js jetstream.JetStream, m *nats.Msg) uint64 {
	t.Helper()
	ack, err := js.PublishMsg(testCtx(t), m)
	if err != nil {
		t.Fatalf("raw publish on %s: %v", m.Subject, err)
	}
	return ack.Sequence
}

func publish(t testing.TB, bus *events.Bus, ev *events.Event) *jetstream.PubAck {
	t.Helper()
	ack, err := bus.Publish(testCtx(t), ev)
	if err != nil {
		t.Fatalf("publish %s %s: %v", ev.Type(), ev.ID(), err)
	}
	return ack
}

// streamCount is the number of messages in stream whose subject matches
// filter.
func streamCount(t testing.TB, js jetstream.JetStream, stream, filter string) uint64 {
	t.Helper()
	ctx := testCtx(t)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// lastMsg is the last message stored on subject in stream.
func lastMsg(t testing.TB, js jetstream.JetStream, stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx := testCtx(t)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("last message on %s in %s: %v", subject, stream, err)
	}
	return m
}

func consumerInfo(t testing.TB, js jetstream.JetStream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := testCtx(t)
	c, err := js.Consumer(ctx, events.EventStream, name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer %s info: %v", name, err)
	}
	return ci
}

// waitIdle waits until the durable consumer has nothing pending and nothing
// unacknowledged.
func waitIdle(t testing.TB, js jetstream.JetStream, name string) {
	t.Helper()
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		ci := consumerInfo(t, js, name)
		if ci.NumPending != 0 || ci.NumAckPending != 0 {
			return fmt.Errorf("consumer %s: %d pending, %d unacknowledged (ack floor %d)", name, ci.NumPending, ci.NumAckPending, ci.AckFloor.Stream)
		}
		// Right after a publish the consumer's pending count may not
		// include the new message yet: idle also means acknowledged up
		// to the last message its filters match.
		filters := ci.Config.FilterSubjects
		if ci.Config.FilterSubject != "" {
			filters = append(filters, ci.Config.FilterSubject)
		}
		if len(filters) == 0 {
			filters = []string{">"}
		}
		s, err := js.Stream(context.Background(), ci.Stream)
		if err != nil {
			return err
		}
		for _, f := range filters {
			m, err := s.GetLastMsgForSubject(context.Background(), f)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if ci.AckFloor.Stream < m.Sequence {
				return fmt.Errorf("consumer %s: acknowledged up to %d, the last message of %s is %d", name, ci.AckFloor.Stream, f, m.Sequence)
			}
		}
		return nil
	})
}

// consume starts a consumer that is stopped when the test ends.
func consume(t testing.TB, bus *events.Bus, cfg events.ConsumerConfig, h events.Handler) *events.Consumer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = eventstest.Logger(t)
	}
	c, err := events.Consume(testCtx(t), bus, cfg, h)
	if err != nil {
		t.Fatalf("consume %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() { stopConsumer(c) })
	return c
}

// progressAcks counts the in-progress acknowledgements (+WPI) that the
// consumer named name sends the server, as any subscriber on the
// acknowledgement subjects sees them: the positive signal that a held
// delivery is being kept alive, and that time passes for the server too.
func progressAcks(t testing.TB, env *eventstest.Env, name string) *atomic.Int64 {
	t.Helper()
	nc := env.Conn(t)
	var n atomic.Int64
	// $JS.ACK.<stream>.<consumer>.… (or, with a domain and an account hash,
	// $JS.ACK.<domain>.<account>.<stream>.<consumer>.…).
	if _, err := nc.Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		if string(m.Data) == "+WPI" && slices.Contains(strings.Split(m.Subject, "."), name) {
			n.Add(1)
		}
	}); err != nil {
		t.Fatalf("subscribe to acknowledgements: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	return &n
}

// waitProgress waits until acks has counted want more in-progress
// acknowledgements than from.
func waitProgress(t testing.TB, acks *atomic.Int64, from, want int64) {
	t.Helper()
	eventstest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := acks.Load() - from; n < want {
			return fmt.Errorf("%d in-progress acknowledgements, want %d", n, want)
		}
		return nil
	})
}

func stopConsumer(c *events.Consumer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.Stop(ctx)
}

// recorder remembers the ids a handler saw, in order.
type recorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *recorder) add(id string) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// formatHeader renders h as sorted "Name: value" lines, one per value.
func formatHeader(h nats.Header) string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		for _, v := range h[k] {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	return b.String()
}

// parseHeader is the inverse of formatHeader; lines without a colon are
// ignored. A nil header comes back for an empty block.
func parseHeader(block []byte) nats.Header {
	var h nats.Header
	for _, line := range strings.Split(string(block), "\n") {
		line = strings.TrimSuffix(line, "\r")
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if h == nil {
			h = nats.Header{}
		}
		h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	return h
}
