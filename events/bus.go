package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bus publishes validated events to the log. Every service owns its own Bus
// over its own connection; a Bus is safe for concurrent use.
type Bus struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	codec *Codec
	obs   Observer // nil: none (see SetObserver)
	batch *batchWriter
}

// NewBus returns a bus over nc that validates every event with codec.
func NewBus(nc *nats.Conn, codec *Codec, opts ...jetstream.JetStreamOpt) (*Bus, error) {
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &Bus{nc: nc, js: js, codec: codec, batch: newBatchWriter(nc)}, nil
}

// SetLogger gives the bus a logger for what an operator should hear of
// its writes (a stream that refuses fast batches); call it before use.
func (b *Bus) SetLogger(log *slog.Logger) { b.batch.log.Store(log) }

// Conn is the bus's NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the bus's JetStream context.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Codec is the bus's codec.
func (b *Bus) Codec() *Codec { return b.codec }

// PublishOption adjusts one publish.
type PublishOption interface{ apply(*nats.Msg) }

// ExpectLastSubjectSeq makes the publish succeed only if the last message on
// Subject (which may be a wildcard, e.g. heed.confirm.<id>.>) has sequence
// Seq (0: no message yet). It is JetStream's optimistic concurrency: of
// several publishers racing on the same expectation exactly one wins.
type ExpectLastSubjectSeq struct {
	Subject string
	Seq     uint64
}

func (o ExpectLastSubjectSeq) apply(m *nats.Msg) {
	m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(o.Seq, 10))
	if o.Subject != "" {
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", o.Subject)
	}
}

// GuardAt guards the event at Index (behind the first) of a
// PublishAllGuarded batch; it keeps its Nats-Msg-Id.
type GuardAt struct {
	Index int
	Guard ExpectLastSubjectSeq
}

// PurgeSchedule removes a pending server-side schedule (see Schedule) in the
// same atomic write as the event, e.g. an answer cancelling its deadline.
type PurgeSchedule struct{ Subject string }

func (o PurgeSchedule) apply(m *nats.Msg) {
	m.Header.Set("Nats-Scheduler", o.Subject)
	m.Header.Set("Nats-Schedule-Next", "purge")
}

// Publish validates ev, writes it to the log and waits for the stream's
// acknowledgement. A duplicate id is not an error: the returned ack has
// Duplicate set and the event is stored once.
func (b *Bus) Publish(ctx context.Context, ev *Event, opts ...PublishOption) (*jetstream.PubAck, error) {
	msg, err := b.codec.Encode(ev)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o.apply(msg)
	}
	ack, err := b.js.PublishMsg(ctx, msg)
	if err != nil {
		return nil, classifyPublishError(msg.Subject, err)
	}
	if b.obs != nil {
		b.obs.Published(ev.Type())
	}
	return ack, nil
}

// PublishAsync validates ev and starts writing it; the future resolves
// with the stream's acknowledgement.
func (b *Bus) PublishAsync(ev *Event, opts ...PublishOption) (jetstream.PubAckFuture, error) {
	msg, err := b.codec.Encode(ev)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o.apply(msg)
	}
	f, err := b.js.PublishMsgAsync(msg)
	if err != nil {
		return nil, classifyPublishError(msg.Subject, err)
	}
	if b.obs != nil {
		// Counted when sent: waiting for the ack would cost a goroutine.
		b.obs.Published(ev.Type())
	}
	return f, nil
}

// PublishAll publishes events in order: what the log holds after it, even
// when it fails, is a prefix of evs. Every event is validated before any
// is sent, so an invalid event refuses the whole batch instead of leaving
// the events before it in the log.
//
// The events go as one JetStream fast batch (fastbatch.go): sent at once,
// stored in order, the server stopping at the first it cannot take. Not
// plain pipelined publishes: one the stream did not take (no leader for a
// moment during a failover) would leave the ones after it stored before
// it, and its retry would store it after them — a run's pause before the
// step it pauses at. A retry's duplicates of a stored prefix are dropped
// (deterministic ids) and the rest follows in order. On a stream that does
// not allow batches (provisioned by an older heed), each event is sent
// once the one before it is stored.
//
// Not a JetStream atomic batch: on a stream of one replica on file
// storage, nats-server stages each atomic batch in a file store of its
// own, about 6 ms a batch against 0.1 ms for three publishes in turn
// (BENCHMARKS.md, "Atomic batches, measured"); and a prefix is all a
// decision needs, as its retry completes it.
func (b *Bus) PublishAll(ctx context.Context, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	if len(evs) == 1 {
		_, err := b.Publish(ctx, &evs[0])
		return err
	}
	msgs := make([]*nats.Msg, len(evs))
	for i := range evs {
		msg, err := b.codec.Encode(&evs[i])
		if err != nil {
			return err
		}
		msgs[i] = msg
	}
	stored := 0
	// Each round stores a message or fails: a batch that ends early
	// without a refusal (a message lost on the way) goes on from where it
	// stopped.
	for stored < len(msgs) && !b.batch.off() {
		n, err := b.batch.write(ctx, msgs[stored:])
		b.published(evs[stored : stored+n])
		stored += n
		if errors.Is(err, errBatchUnsupported) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return classifyPublishError(msgs[stored].Subject, err)
		}
		if n == 0 {
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("publish %s: the stream took none of a batch", msgs[stored].Subject)}
		}
	}
	for i := stored; i < len(msgs); i++ {
		if _, err := b.js.PublishMsg(ctx, msgs[i]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return classifyPublishError(msgs[i].Subject, err)
		}
		b.published(evs[i : i+1])
	}
	return nil
}

// PublishAllGuarded is PublishAll whose write happens only if guard holds
// when the first event is stored: of several writers racing on the same
// expectation one writes its events, the others write nothing and get an
// error wrapping ErrStaleRead, as is a writer whose events are in the log
// already (a retry after a crash). A writer that read the log after this
// one's first event races only with what follows it: see the loop below.
// It returns the stream sequence of the last event stored.
//
// The first event goes without Nats-Msg-Id. In a fast batch the server
// drops a duplicate before it looks at the guard, and then stores the
// events behind it: a retry, or a loser whose first event has the same id
// as the winner's, would append its other events to the winner's. The
// guard alone keeps the first event to once; the events behind it keep
// their ids.
//
// Events behind the first may carry guards of their own (more): the
// batch stops at one whose guard does not hold, after the events before
// it were stored, and the error wraps ErrStaleRead as for the first.
func (b *Bus) PublishAllGuarded(ctx context.Context, evs []Event, guard ExpectLastSubjectSeq, more ...GuardAt) (uint64, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	msgs := make([]*nats.Msg, len(evs))
	for i := range evs {
		msg, err := b.codec.Encode(&evs[i])
		if err != nil {
			return 0, err
		}
		msgs[i] = msg
	}
	guard.apply(msgs[0])
	delete(msgs[0].Header, HeaderMsgID)
	for _, g := range more {
		if g.Index <= 0 || g.Index >= len(msgs) {
			return 0, fmt.Errorf("guard of event %d of a batch of %d: not an event behind the first", g.Index, len(msgs))
		}
		g.Guard.apply(msgs[g.Index])
	}
	from, seq := 0, uint64(0)
	if !b.batch.off() && serverKnowsFastBatches(b.nc) {
		n, last, err := b.batch.writeSeq(ctx, msgs)
		b.published(evs[:n])
		switch {
		case err == nil && n == len(msgs):
			return last, nil
		case err == nil && n > 0:
			// Ended early without a refusal (a message lost on the way):
			// the first is stored; the rest follows one at a time.
			from, seq = n, last
		case errors.Is(err, errBatchUnsupported):
			// Written one at a time below.
		case err == nil:
			return 0, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("publish %s: the stream took none of a batch", msgs[0].Subject)}
		default:
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, classifyPublishError(msgs[n].Subject, err)
		}
	}
	// Each once the one before it is stored. An event behind the first
	// that the stream has already (its id) was written by another writer
	// that read the log after this one's first: what follows is not this
	// writer's to add, as when its guard fails. (In a fast batch the
	// events follow the first back to back, and nats-server drops such a
	// duplicate without a word; another writer's event can only come in
	// between when the batch stops early, and the rest is sent here.)
	for i := from; i < len(msgs); i++ {
		ack, err := b.js.PublishMsg(ctx, msgs[i])
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, classifyPublishError(msgs[i].Subject, err)
		}
		if ack.Duplicate && i > 0 {
			return 0, &Error{Code: CodeConflict, Message: fmt.Sprintf("publish %s: event %s was written before by another writer", msgs[i].Subject, evs[i].ID()), Err: ErrStaleRead}
		}
		b.published(evs[i : i+1])
		seq = max(seq, ack.Sequence)
	}
	return seq, nil
}

// serverKnowsFastBatches reports whether the server this connection is
// on speaks fast batch publishing (nats-server 2.14 and later). An older
// one stores a batch's messages as plain publishes: a guarded batch whose
// first message it refuses would still have the rest stored.
func serverKnowsFastBatches(nc *nats.Conn) bool { return fastBatchVersion(nc.ConnectedServerVersion()) }

func fastBatchVersion(v string) bool {
	majorS, rest, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	minorS, _, _ := strings.Cut(rest, ".")
	major, err1 := strconv.Atoi(majorS)
	minor, err2 := strconv.Atoi(minorS)
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 14
}

func (b *Bus) published(evs []Event) {
	if b.obs == nil {
		return
	}
	for i := range evs {
		b.obs.Published(evs[i].Type())
	}
}

// ScheduleAt stores a server-side message schedule on subject: at time at,
// the server itself stores a copy of header and body on target (without
// the schedule's Nats-* headers), even if no heed process is running then.
// The deadline lives in the stream, so it survives every restart and costs
// no goroutine. A later schedule on the same subject replaces it; a
// PurgeSchedule on a write cancels it. Schedules are not events: heed's own
// carry no CloudEvents headers, so no CloudEvents reader mistakes them for
// one.
func (b *Bus) ScheduleAt(ctx context.Context, subject, target string, at time.Time, header nats.Header, body []byte, opts ...PublishOption) (*jetstream.PubAck, error) {
	msg := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: body}
	for k, v := range header {
		msg.Header[k] = v
	}
	for _, o := range opts {
		o.apply(msg)
	}
	msg.Header.Set("Nats-Schedule", "@at "+at.UTC().Format(time.RFC3339Nano))
	msg.Header.Set("Nats-Schedule-Target", target)
	ack, err := b.js.PublishMsg(ctx, msg)
	if err != nil {
		return nil, classifyPublishError(subject, err)
	}
	return ack, nil
}

func classifyPublishError(subject string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return &Error{Code: CodeConflict, Message: fmt.Sprintf("publish %s: %s", subject, apiErr.Description), Err: fmt.Errorf("%w: %w", ErrStaleRead, err)}
		}
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("publish %s: %s", subject, apiErr.Description), Err: err}
	}
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("publish %s: no stream captures this subject (is heed provisioned?)", subject), Err: err}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("publish %s: %v", subject, err), Err: err}
}
