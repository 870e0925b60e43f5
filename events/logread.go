package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadLog calls fn for every stored message matching filters, in log order,
// starting after sequence after (0: from the beginning) and ending at the
// stream's last sequence as of the call. It returns the last sequence it
// covered. Bad messages are passed to fn too: callers decide (usually they
// skip what the gate dead-lettered).
//
// ReadLog reads through an ordered consumer it deletes at the end: it is
// for large reads across several subjects (heed replay of a projection).
// An aggregate's history is read with ReadHistory, which leaves no state
// on the server.
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

// History reads (ReadHistory) use batched direct gets: one request
// returns up to historyBatch messages of the subject, read by the server
// while the stream holds its writes back, so the batch is bounded by what
// is stored at that moment. No consumer is created: a command or a
// handler reading an aggregate leaves nothing on the server.
const (
	historyBatch    = 256     // messages per direct get; a run's history is usually one
	historyMaxBytes = 4 << 20 // bytes per direct get, so a batch never floods the reader
)

// batchGetRequest is a batched direct get of one subject's messages (a
// history read): up to Batch messages of NextBy from Seq on.
type batchGetRequest struct {
	Seq      uint64 `json:"seq"`
	NextBy   string `json:"next_by_subj"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes"`
}

// Headers the server adds to a message served by a direct get. They are
// not part of what was stored, and a reader must see what was stored.
var directGetHeaders = []string{
	jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader,
	jetstream.TimeStampHeaer, "Nats-Num-Pending", "Nats-Last-Sequence",
}

// ReadHistory calls fn for every stored message matching filter (one
// subject, wildcards allowed: an aggregate's history, heed.run.<id>.>),
// in log order, after sequence after (0: from the beginning), up to what
// the stream held when the read began. It returns the sequence of the last
// message it passed, or after when there was none. A read that stops short
// of what the stream said it held is an error, never a shorter history.
// Bad messages are passed to fn too, as with ReadLog.
//
// It uses batched direct gets (the stream allows direct get): two round
// trips for a history of up to historyBatch+1 messages (one for a single
// message) and no server state,
// where ReadLog creates and deletes a consumer. ReadLog stays for reads
// across many subjects or the whole log (heed replay).
func ReadHistory(ctx context.Context, js jetstream.JetStream, stream, filter string, after uint64, fn func(RawMsg) error) (uint64, error) {
	unavailable := func(err error) error {
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read %s on %s: %v", filter, stream, err), Err: err}
	}
	last := after
	// want is how many messages matched when the read began: the first
	// message of the first batch says how many more follow it. Later
	// batches may hold messages stored since; the read stops at want.
	var want, got uint64
	// expect is the aggregate's last message when the read began after a
	// position (0: not known).
	var expect uint64
	// The server does not stop a batch when the subject has no more
	// messages: it looks for the next one up to the end of the stream,
	// message by message for a wildcard. The first request asks for one
	// message (its header says how many follow), every later one for
	// exactly what is left, so no read walks the log past the aggregate's
	// last message.
	if after > 0 {
		// A read from the middle of the log that finds nothing would walk
		// to its end (with many subjects the server does not skip blocks
		// by its subject index): the aggregate's last message, found from
		// that index, says first whether anything came after.
		last, err := lastOfMsg(ctx, js, stream, filter)
		if err != nil {
			return after, err
		}
		if last == nil {
			return after, nil
		}
		seq, err := strconv.ParseUint(last.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return after, unavailable(fmt.Errorf("direct get: sequence: %w", err))
		}
		if seq <= after {
			return after, nil
		}
		expect = seq
	}
	first, np, err := firstOf(ctx, js, stream, filter, after+1)
	// The last message said more came after after; a replica a moment
	// behind (any replica answers a direct get) may not have it yet: ask
	// again before calling the history complete.
	for again := 0; err == nil && first == nil && expect > 0 && again < shortReadRetries && ctx.Err() == nil; again++ {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(again+1) * 10 * time.Millisecond):
		}
		first, np, err = firstOf(ctx, js, stream, filter, after+1)
	}
	if err != nil {
		return last, unavailable(err)
	}
	if first == nil && expect > 0 {
		return last, unavailable(fmt.Errorf("the read stopped short: message %d is in the log and no replica answered with it", expect))
	}
	if first == nil {
		return last, nil // nothing stored after after
	}
	want, got = np+1, 1
	if err := fn(*first); err != nil {
		return first.Seq, err
	}
	last = first.Seq
	for got < want {
		size := int(min(want-got, historyBatch))
		req, err := json.Marshal(batchGetRequest{last + 1, filter, size, historyMaxBytes})
		if err != nil {
			return last, err
		}
		batch, _, err := directBatch(ctx, js, stream, req)
		// A replicated stream's direct gets are answered by any replica,
		// and one a moment behind the one that counted them has none of
		// them yet: ask again (another replica, or the same caught up)
		// before taking the read for short.
		for again := 0; err == nil && len(batch) == 0 || errors.Is(err, errNoDirectMessages); again++ {
			if again == shortReadRetries || ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(again+1) * 10 * time.Millisecond):
			}
			batch, _, err = directBatch(ctx, js, stream, req)
		}
		if err != nil && !errors.Is(err, errNoDirectMessages) {
			return last, unavailable(err)
		}
		if len(batch) == 0 {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			// The server said more were stored, and none came (the
			// messages were purged meanwhile): a short read must not pass
			// for the whole history.
			return last, unavailable(fmt.Errorf("the read stopped short: %d of %d messages (no messages)", got, want))
		}
		for _, m := range batch {
			raw, err := directRaw(m)
			if err != nil {
				return last, unavailable(err)
			}
			got++
			if err := fn(*raw); err != nil {
				return raw.Seq, err
			}
			last = raw.Seq
			if got >= want {
				return last, nil
			}
		}
	}
	return last, nil
}

// shortReadRetries is how many times a history read asks again for
// messages the server counted and a batch did not bring (10, 20, … ms
// apart: about 150 ms in all).
const shortReadRetries = 5

// firstOf reads the first message of filter at or after seq, with how many
// more the stream holds after it, in one request through the connection's
// shared reply subscription (no inbox of its own, as a batch of more needs:
// directBatch). It returns nil when there is none.
func firstOf(ctx context.Context, js jetstream.JetStream, stream, filter string, seq uint64) (*RawMsg, uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	req, err := json.Marshal(batchGetRequest{seq, filter, 1, historyMaxBytes})
	if err != nil {
		return nil, 0, err
	}
	prefix := apiPrefix(js)
	// The reply is the message (or 404), then an end-of-batch marker the
	// shared subscription drops.
	m, err := js.Conn().RequestWithContext(ctx, prefix+"DIRECT.GET."+stream, req)
	if err != nil {
		return nil, 0, err
	}
	if len(m.Data) == 0 && m.Header.Get("Status") != "" {
		if m.Header.Get("Status") == "404" {
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("direct get: status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
	}
	np, err := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("the stream does not answer batched direct gets (is it there, allowing direct get, on nats-server 2.11 or later?): no pending count: %w", err)
	}
	raw, err := directRaw(m)
	return raw, np, err
}

// LastOf reads the last message of filter (a literal subject or a
// wildcard) in one direct get, or nil when there is none. For a wildcard
// the server finds it from its subject index, block by block from the
// end: no walk of the log message by message, as a history read from the
// start can be.
func LastOf(ctx context.Context, js jetstream.JetStream, stream, filter string) (*RawMsg, error) {
	m, err := lastOfMsg(ctx, js, stream, filter)
	if err != nil || m == nil {
		return nil, err
	}
	return directRaw(m)
}

// lastOfMsg is LastOf's direct get, the reply as the server sent it (its
// Nats-Stream header says which stream answered).
func lastOfMsg(ctx context.Context, js jetstream.JetStream, stream, filter string) (*nats.Msg, error) {
	m, err := directGet(ctx, js, stream, struct {
		LastBy string `json:"last_by_subj"`
	}{filter})
	if err != nil {
		return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read the last of %s on %s: %v", filter, stream, err), Err: err}
	}
	return m, nil
}

// directGet sends one direct get request (not a batch) to stream and
// returns the reply as the server sent it, or nil when it found no
// message (404).
func directGet(ctx context.Context, js jetstream.JetStream, stream string, req any) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m, err := js.Conn().RequestWithContext(ctx, apiPrefix(js)+"DIRECT.GET."+stream, b)
	if err != nil {
		return nil, err
	}
	if len(m.Data) == 0 && m.Header.Get("Status") != "" {
		if m.Header.Get("Status") == "404" {
			return nil, nil
		}
		return nil, fmt.Errorf("status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
	}
	return m, nil
}

// FirstOf reads the first message of filter at or after seq and how many
// more of filter the stream holds after it, in one direct get; nil when
// there is none. Cheap for a literal subject (the subject index answers);
// for a wildcard the server may walk the log to count.
func FirstOf(ctx context.Context, js jetstream.JetStream, stream, filter string, seq uint64) (*RawMsg, uint64, error) {
	m, np, err := firstOf(ctx, js, stream, filter, seq)
	if err != nil {
		return nil, 0, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read the first of %s on %s: %v", filter, stream, err), Err: err}
	}
	return m, np, nil
}

// apiPrefix is the JetStream API prefix of js, ending with a dot.
func apiPrefix(js jetstream.JetStream) string {
	prefix := js.Options().APIPrefix
	if prefix == "" {
		return jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	return prefix
}

// directRaw is the stored message a direct get replied with: its
// subject, sequence and time from the reply's headers, which it drops.
func directRaw(m *nats.Msg) (*RawMsg, error) {
	mseq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get: sequence: %w", err)
	}
	stored, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("direct get: time stamp: %w", err)
	}
	subject := m.Header.Get(jetstream.SubjectHeader)
	for _, h := range directGetHeaders {
		m.Header.Del(h)
	}
	return &RawMsg{Subject: subject, Header: m.Header, Data: m.Data, Seq: mseq, Stored: stored}, nil
}
