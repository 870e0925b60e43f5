package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// A decision's events go to the log as one JetStream fast batch
// (nats-server ≥ 2.14, the stream's allow_batched): every message is sent
// at once, and the server stores them in order or stops at the first it
// cannot take (gap mode "fail": a message lost on the way, or refused,
// ends the batch there). One round trip for the whole decision, and the
// guarantee PublishAll needs: what is stored is a prefix, in order.
//
// The protocol is the reply subject of each message,
// <inbox>.<batch id>.<flow>.fail.<batch seq>.<op>.$FI, and the server's
// answers to it: a flow ack after the first message, informational gap and
// error reports, and a final PubAck carrying how many of the batch's
// messages it took ("count"). orbit.go's jetstreamext.FastPublisher speaks
// it too, but waits for the first message's ack and subscribes once per
// batch: two round trips and a subscription for a four-event decision.
// batchWriter keeps one wildcard subscription for the bus's life and waits
// only for the end.
//
// One case where a batch is weaker than publishes one at a time (reviewed,
// left): on a replicated stream the server counts a message whose id it
// has proposed but not yet committed as a duplicate, so a retry that meets
// the first attempt's uncommitted entries is acknowledged whole; if that
// leader then loses them in a failover, the decision's events are gone
// although PublishAll returned nil. It needs a timed-out write, its retry
// within the raft round and a lost leader; the runner's sweep re-decides a
// run that went quiet from what the log holds.

const (
	fastBatchStart  = 0
	fastBatchAppend = 1
	fastBatchCommit = 2
	// fastBatchFlow is the most messages the server may let pass between
	// two flow acks. It caps them at 500 and, while several batches are
	// open on the stream, acknowledges every message: the acks are
	// informational here (a decision is a few messages, sent at once), so
	// they are read and dropped.
	fastBatchFlow = 1000
	// batchRetryAfter is how long a stream that refused batches is
	// written one event at a time before batches are tried again (another
	// service may update its configuration meanwhile).
	batchRetryAfter = time.Minute
)

// batchWriter writes fast batches over one connection.
type batchWriter struct {
	nc    *nats.Conn
	inbox string
	log   atomic.Pointer[slog.Logger] // says when batches are turned off; nil: silent
	// offUntil (unix ns): until then the stream is written one event at a
	// time: it refused batches (provisioned by an older heed, or a server
	// older than 2.14).
	offUntil atomic.Int64

	mu      sync.Mutex
	sub     *nats.Subscription
	waiting map[string]*pendingBatch
}

// pendingBatch collects the server's answers to one batch.
type pendingBatch struct {
	done chan struct{}
	once sync.Once
	// Set under the writer's lock; ack, err before done is closed:
	ack     *batchAck
	err     error               // an answer that is not JetStream's (no responders)
	flowErr *jetstream.APIError // the message the batch stopped at, and why
}

// batchAck is one of the server's answers to a batch, read once: an
// informational one has a type (ack, gap, err: the message it stopped at
// and why); the final one is a PubAck with the batch's id and count, or
// an error.
type batchAck struct {
	Type  string              `json:"type,omitempty"`
	Batch string              `json:"batch,omitempty"`
	Count uint64              `json:"count,omitempty"`
	Seq   uint64              `json:"seq,omitempty"` // of the last message stored
	Error *jetstream.APIError `json:"error,omitempty"`
}

func newBatchWriter(nc *nats.Conn) *batchWriter {
	return &batchWriter{nc: nc, inbox: nc.NewInbox(), waiting: map[string]*pendingBatch{}}
}

// errBatchUnsupported: the stream refused the batch as such (not allowed
// on it); the caller writes the events one at a time instead.
var errBatchUnsupported = errors.New("fast batch publish not enabled on the stream")

// write sends msgs as one batch and returns how many of them, from the
// first, the stream stored (a duplicate, dropped, counts as stored: a
// retry's prefix). Fewer than all with a nil error means the batch ended
// early without a refusal (a message lost on the way: the server saw a
// gap); the caller sends the rest again.
func (w *batchWriter) write(ctx context.Context, msgs []*nats.Msg) (int, error) {
	n, _, err := w.writeSeq(ctx, msgs)
	return n, err
}

// writeSeq is write that also returns the stream sequence of the last
// message the batch stored (0 if none is known).
func (w *batchWriter) writeSeq(ctx context.Context, msgs []*nats.Msg) (int, uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if err := w.subscribe(); err != nil {
		return 0, 0, err
	}
	id := nuid.Next()
	p := &pendingBatch{done: make(chan struct{})}
	w.mu.Lock()
	w.waiting[id] = p
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiting, id)
		w.mu.Unlock()
	}()
	prefix := w.inbox + "." + id + "." + strconv.Itoa(fastBatchFlow) + ".fail."
	for i, msg := range msgs {
		op := fastBatchAppend
		switch {
		case i == len(msgs)-1: // first: a batch of one commits at once
			op = fastBatchCommit
		case i == 0:
			op = fastBatchStart
		}
		out := *msg
		out.Reply = prefix + strconv.Itoa(i+1) + "." + strconv.Itoa(op) + ".$FI"
		if err := w.nc.PublishMsg(&out); err != nil {
			return 0, 0, err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("no acknowledgement of the batch: %w", ctx.Err())
	}
	w.mu.Lock()
	ack, answerErr, flowErr := p.ack, p.err, p.flowErr
	w.mu.Unlock()
	if answerErr != nil {
		return 0, 0, answerErr
	}
	if ack.Error != nil {
		if ack.Error.ErrorCode == jetstream.ErrorCode(jsErrCodeBatchPublishDisabled) {
			w.turnOff(msgs[0].Subject, "the stream does not allow fast batches (allow_batched off: provisioned by an older heed)")
			return 0, 0, errBatchUnsupported
		}
		// What of the batch the stream took before it refused is not
		// said: the caller's retry writes it again, and the stream drops
		// what it has (deterministic ids).
		return 0, 0, ack.Error
	}
	if ack.Batch != id {
		// A server that does not know the protocol (before 2.14) stored
		// the messages as plain publishes and acknowledged the first.
		w.turnOff(msgs[0].Subject, "the server does not speak fast batch publishing (nats-server before 2.14)")
		return 0, 0, errBatchUnsupported
	}
	n := int(ack.Count)
	if n > len(msgs) {
		n = len(msgs)
	}
	if n < len(msgs) && flowErr != nil {
		return n, ack.Seq, flowErr
	}
	return n, ack.Seq, nil
}

// turnOff writes one event at a time for batchRetryAfter, and says so:
// correct, but a round trip per event, which an operator should know.
func (w *batchWriter) turnOff(subject, why string) {
	w.offUntil.Store(time.Now().Add(batchRetryAfter).UnixNano())
	if log := w.log.Load(); log != nil {
		log.Warn("writing each event once the one before it is stored, not a decision's events in one round trip: "+why+"; upgrade nats-server to 2.14 or later and let a service of this version provision the stream",
			"subject", subject, "retry_in", batchRetryAfter)
	}
}

// off reports whether batches are not to be tried now.
func (w *batchWriter) off() bool { return time.Now().UnixNano() < w.offUntil.Load() }

// jsErrCodeBatchPublishDisabled is nats-server's JSBatchPublishDisabledErr.
const jsErrCodeBatchPublishDisabled = 10205

func (w *batchWriter) subscribe() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sub != nil {
		return nil
	}
	sub, err := w.nc.Subscribe(w.inbox+".>", w.answer)
	if err != nil {
		return err
	}
	// Answers are small and few; never drop one for a slow consumer.
	_ = sub.SetPendingLimits(-1, -1)
	w.sub = sub
	return nil
}

// answer routes one of the server's answers to the batch it is about.
func (w *batchWriter) answer(m *nats.Msg) {
	rest := strings.TrimPrefix(m.Subject, w.inbox+".")
	id, _, _ := strings.Cut(rest, ".")
	w.mu.Lock()
	p := w.waiting[id]
	w.mu.Unlock()
	if p == nil {
		return // an answer after the batch ended (the rest of a batch the server stopped)
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		// No stream captures the subject: nats.go's own answer.
		p.once.Do(func() {
			w.mu.Lock()
			p.err, p.ack = nats.ErrNoResponders, &batchAck{}
			w.mu.Unlock()
			close(p.done)
		})
		return
	}
	var ack batchAck
	if err := json.Unmarshal(m.Data, &ack); err != nil {
		ack = batchAck{Error: &jetstream.APIError{Code: 500, Description: "unreadable batch acknowledgement: " + err.Error()}}
	}
	if ack.Type != "" {
		if ack.Type == "err" && ack.Error != nil {
			w.mu.Lock()
			if p.flowErr == nil {
				p.flowErr = ack.Error
			}
			w.mu.Unlock()
		}
		return
	}
	p.once.Do(func() {
		w.mu.Lock()
		p.ack = &ack
		w.mu.Unlock()
		close(p.done)
	})
}
