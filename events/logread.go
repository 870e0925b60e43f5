package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ReadLog calls fn for every stored message matching filters, in log order,
// starting after sequence after (0: from the beginning) and ending at the
// stream's last sequence as of the call. It returns the last sequence it
// covered. Bad messages are passed to fn too: callers decide (usually they
// skip what the gate dead-lettered).
func ReadLog(ctx context.Context, js jetstream.JetStream, stream string, filters []string, after uint64, fn func(RawMsg) error) (uint64, error) {
	// js.Stream fetches the stream's info: its last sequence bounds the read.
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("stream %s: %v", stream, err), Err: err}
	}
	last := s.CachedInfo().State.LastSeq
	if last <= after {
		return last, nil
	}
	// An ordered consumer lives on the server until deleted or idle; delete
	// it as soon as the read is over so reads do not pile up consumers
	// (every stored message is matched against every consumer's filter).
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: 30 * time.Second}
	if after > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = after + 1
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return 0, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read %s: %v", stream, err), Err: err}
	}
	// The create reply carries the consumer's info: how much it will read.
	ci := cons.CachedInfo()
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.DeleteConsumer(dctx, info.Name)
			cancel()
		}
	}()
	if ci.NumPending == 0 {
		return last, nil
	}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return 0, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read %s: %v", stream, err), Err: err}
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return 0, fmt.Errorf("read %s: %w", stream, err)
			}
			if meta.Sequence.Stream > last {
				return last, nil
			}
			if err := fn(RawMsg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data(), Seq: meta.Sequence.Stream, Stored: meta.Timestamp}); err != nil {
				return meta.Sequence.Stream, err
			}
			if meta.NumPending == 0 || meta.Sequence.Stream == last {
				return last, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return 0, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read %s: %v", stream, err), Err: err}
		}
		if n == 0 {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			// The consumer said there was more up to last, and nothing came:
			// a short read must not pass for the whole history.
			return 0, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read %s: the log stopped short of sequence %d", stream, last)}
		}
	}
}
