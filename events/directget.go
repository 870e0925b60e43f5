package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Batched direct gets (a batch of one subject's messages, or the last
// message of each of many subjects) answer with several messages and an
// end-of-batch marker. They are read here through an asynchronous
// subscription on an inbox of their own. orbit.go's jetstreamext reads them
// through a synchronous one, whose channel of 64k slots (512 KB, zeroed and
// then scanned by the collector) is allocated per request: the runner's
// sweep of 10,000 waiting runs made 40 of them every 15 s (the RSS at rest
// jumped by ~5 MB each time), and every history read of more than one
// message made one.

// errNoDirectMessages: the request matched no message (status 404).
var errNoDirectMessages = errors.New("no messages")

// directBatchWait bounds a batched direct get whose context has no
// deadline.
const directBatchWait = 5 * time.Second

// directEnd is what a batch's end-of-batch marker said: how many matching
// messages the server did not send (it stops at max_bytes, the server's
// max_pending by default), and for a multi-last request the sequence it
// read up to.
type directEnd struct {
	pending, upTo uint64
}

// directBatch sends one batched direct get request to stream and returns
// the messages it answered, in order, without the end-of-batch marker,
// and what the marker said. A request that matched nothing is
// errNoDirectMessages; a reply that is not a batch's (a server without
// batched direct gets), a status other than 404, or a 404 after messages
// (the server failed to load one it had found) is an error. The server
// bounds a batch (max_bytes, 1,024 messages for a multi-last request), so
// the whole answer is held.
func directBatch(ctx context.Context, js jetstream.JetStream, stream string, req []byte) ([]*nats.Msg, directEnd, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, directBatchWait)
		defer cancel()
	}
	nc := js.Conn()
	inbox := nc.NewInbox()
	var (
		mu    sync.Mutex
		got   []*nats.Msg
		ended = make(chan struct{})
		end   error
		over  bool
		eob   directEnd
	)
	finish := func(err error) {
		if !over {
			over, end = true, err
			close(ended)
		}
	}
	// The handler runs on the subscription's own goroutine, one message at
	// a time in the order the server sent them.
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if over {
			return
		}
		if len(m.Data) == 0 && m.Header != nil {
			switch status := m.Header.Get("Status"); status {
			case "":
			case "204": // end of batch
				eob.pending, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				eob.upTo, _ = strconv.ParseUint(m.Header.Get("Nats-UpTo-Sequence"), 10, 64)
				finish(nil)
				return
			case "404":
				if len(got) > 0 {
					finish(fmt.Errorf("direct get: cut short after %d messages: %s", len(got), m.Header.Get("Description")))
					return
				}
				finish(errNoDirectMessages)
				return
			case "503":
				finish(nats.ErrNoResponders)
				return
			default:
				finish(fmt.Errorf("direct get: status %s %s", status, m.Header.Get("Description")))
				return
			}
		}
		if m.Header.Get("Nats-Num-Pending") == "" {
			finish(errors.New("the stream does not answer batched direct gets (is it there, allowing direct get, on nats-server 2.11 or later?): no pending count"))
			return
		}
		got = append(got, m)
	})
	if err != nil {
		return nil, directEnd{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(apiPrefix(js)+"DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, directEnd{}, err
	}
	select {
	case <-ended:
	case <-ctx.Done():
		mu.Lock()
		finish(ctx.Err())
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	return got, eob, end
}

// LastOfEach reads the last message of each of subjects (literal
// subjects), in batches of lastOfEachBatch subjects, one direct get each,
// and returns those that have one, in log order within a batch. The server
// finds them from its subject index: subjects with no message cost
// nothing to read.
func LastOfEach(ctx context.Context, js jetstream.JetStream, stream string, subjects []string) ([]RawMsg, error) {
	var out []RawMsg
	for len(subjects) > 0 {
		chunk := subjects[:min(len(subjects), lastOfEachBatch)]
		subjects = subjects[len(chunk):]
		fail := func(err error) error {
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read the last message of %d subjects on %s: %v", len(chunk), stream, err), Err: err}
		}
		// The server sends the messages in log order and stops at
		// max_bytes (asked for as a history read does: a batch of the
		// server's max_pending could trip its slow-consumer limit),
		// saying how many it left: the rest is asked for from the next
		// sequence, up to the same end.
		var from, upTo uint64
		for {
			req, err := json.Marshal(struct {
				MultiLast []string `json:"multi_last"`
				Seq       uint64   `json:"seq,omitempty"`
				UpTo      uint64   `json:"up_to_seq,omitempty"`
				MaxBytes  int      `json:"max_bytes"`
			}{chunk, from, upTo, historyMaxBytes})
			if err != nil {
				return nil, err
			}
			msgs, end, err := directBatch(ctx, js, stream, req)
			if errors.Is(err, errNoDirectMessages) {
				break
			}
			if err != nil {
				return nil, fail(err)
			}
			for _, m := range msgs {
				raw, err := directRaw(m)
				if err != nil {
					return nil, fail(err)
				}
				out = append(out, *raw)
				from = raw.Seq + 1
			}
			if end.pending == 0 {
				break
			}
			if len(msgs) == 0 || end.upTo == 0 {
				return nil, fail(fmt.Errorf("the server left %d messages and sent none", end.pending))
			}
			upTo = end.upTo
		}
	}
	return out, nil
}

// lastOfEachBatch is how many subjects one LastOfEach request names (the
// server answers up to 1,024 messages a request; 256 measured no slower
// than 1,024 with 10,000 subjects, BENCHMARKS.md).
const lastOfEachBatch = 256

// ErrSeqsChanged says that a message ReadSeqs was asked for is no longer
// what it was: gone (purged, deleted, or not yet on the replica that
// answered) or on a subject outside the filter. The caller reads the
// history again the ordinary way.
var ErrSeqsChanged = errors.New("a message read by sequence is gone or not the aggregate's")

// seqsInFlight bounds the direct gets ReadSeqs has sent and not yet had
// answered.
const seqsInFlight = 64

// ReadSeqs calls fn with the messages of stream at seqs (ascending), in
// order, each of which must match filter (one subject, wildcards allowed).
// It is a history read for a reader that kept where an aggregate's
// messages are: one direct get by sequence each, sent without waiting for
// the previous answer, which the server answers from the block that holds
// the message. A read of the same history by subject from a sequence in
// the middle of the log (ReadHistory) makes the server walk every message
// of its block between two of the aggregate's: with many aggregates
// interleaved, thousands of messages per read. A message that is gone or
// not the filter's ends the read with ErrSeqsChanged, before fn sees
// anything after it.
func ReadSeqs(ctx context.Context, js jetstream.JetStream, stream, filter string, seqs []uint64, fn func(RawMsg) error) error {
	if len(seqs) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, directBatchWait)
		defer cancel()
	}
	fail := func(err error) error {
		if errors.Is(err, ErrSeqsChanged) || errors.Is(err, context.Canceled) {
			return err
		}
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("read %d messages of %s on %s by sequence: %v", len(seqs), filter, stream, err), Err: err}
	}
	nc := js.Conn()
	inbox := nc.NewInbox()
	// Each request's reply subject ends with its index in seqs; the
	// handler files the reply there. Replies may come in any order.
	replies := make(chan *nats.Msg, len(seqs))
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		select {
		case replies <- m:
		default: // more replies than requests: not this read's
		}
	})
	if err != nil {
		return fail(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject := apiPrefix(js) + "DIRECT.GET." + stream
	got := make([]*nats.Msg, len(seqs))
	sent, next, received := 0, 0, 0
	var req []byte
	for next < len(seqs) {
		for sent < len(seqs) && sent-received < seqsInFlight {
			req = strconv.AppendUint(append(req[:0], `{"seq":`...), seqs[sent], 10)
			req = append(req, '}')
			if err := nc.PublishRequest(subject, inbox+"."+strconv.Itoa(sent), req); err != nil {
				return fail(err)
			}
			sent++
		}
		select {
		case m := <-replies:
			i, err := strconv.Atoi(m.Subject[len(inbox)+1:])
			if err != nil || i < 0 || i >= sent || got[i] != nil {
				continue // not a reply to this read
			}
			got[i] = m
			received++
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		// Pass on every message up to the first not yet answered.
		for next < len(seqs) && got[next] != nil {
			m := got[next]
			got[next] = nil
			if len(m.Data) == 0 && m.Header.Get("Status") != "" {
				if m.Header.Get("Status") == "404" {
					return ErrSeqsChanged
				}
				return fail(fmt.Errorf("direct get: status %s %s", m.Header.Get("Status"), m.Header.Get("Description")))
			}
			raw, err := directRaw(m)
			if err != nil {
				return fail(err)
			}
			if raw.Seq != seqs[next] || !subjectMatches(filter, raw.Subject) {
				return ErrSeqsChanged
			}
			if err := fn(*raw); err != nil {
				return err
			}
			next++
		}
	}
	return nil
}
