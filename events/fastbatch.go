package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

const (
	fastBatchStart  = 0
	fastBatchAppend = 1
	fastBatchCommit = 2
	// fastBatchFlow asks the server to acknowledge every this many
	// messages: more than a decision holds, so the only answers are the
	// first message's flow ack and the commit's PubAck.
	fastBatchFlow = 1000
)

// batchWriter writes fast batches over one connection.
type batchWriter struct {
	nc       *nats.Conn
	inbox    string
	disabled atomic.Bool // the stream does not allow batches (provisioned by an older heed)

	mu      sync.Mutex
	sub     *nats.Subscription
	waiting map[string]*pendingBatch
}

// pendingBatch collects the server's answers to one batch.
type pendingBatch struct {
	done chan struct{}
	once sync.Once
	// Set before done is closed:
	ack     *batchAck
	flowErr *jetstream.APIError // the message the batch stopped at, and why
}

// batchAck is the server's final answer to a batch: a PubAck with the
// batch's id and count, or an error.
type batchAck struct {
	Stream    string              `json:"stream"`
	Seq       uint64              `json:"seq"`
	Duplicate bool                `json:"duplicate,omitempty"`
	Batch     string              `json:"batch,omitempty"`
	Count     uint64              `json:"count,omitempty"`
	Error     *jetstream.APIError `json:"error,omitempty"`
}

// batchFlow is one of the server's informational answers.
type batchFlow struct {
	Type  string              `json:"type"` // ack, gap, err
	Seq   uint64              `json:"seq"`
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
	if err := w.subscribe(); err != nil {
		return 0, err
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
		case i == 0:
			op = fastBatchStart
		case i == len(msgs)-1:
			op = fastBatchCommit
		}
		out := *msg
		out.Reply = prefix + strconv.Itoa(i+1) + "." + strconv.Itoa(op) + ".$FI"
		if err := w.nc.PublishMsg(&out); err != nil {
			return 0, err
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
		return 0, fmt.Errorf("no acknowledgement of the batch: %w", ctx.Err())
	}
	if p.ack.Error != nil {
		if p.ack.Error.ErrorCode == jetstream.ErrorCode(jsErrCodeBatchPublishDisabled) {
			w.disabled.Store(true)
			return 0, errBatchUnsupported
		}
		return 0, p.ack.Error
	}
	n := int(p.ack.Count)
	if n > len(msgs) {
		n = len(msgs)
	}
	if n < len(msgs) && p.flowErr != nil {
		return n, p.flowErr
	}
	return n, nil
}

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
	var flow batchFlow
	if err := json.Unmarshal(m.Data, &flow); err == nil && flow.Type != "" {
		if flow.Type == "err" && flow.Error != nil {
			w.mu.Lock()
			if p.flowErr == nil {
				p.flowErr = flow.Error
			}
			w.mu.Unlock()
		}
		return
	}
	var ack batchAck
	if err := json.Unmarshal(m.Data, &ack); err != nil {
		ack.Error = &jetstream.APIError{Code: 500, Description: "unreadable batch acknowledgement: " + err.Error()}
	}
	p.once.Do(func() {
		w.mu.Lock()
		p.ack = &ack
		w.mu.Unlock()
		close(p.done)
	})
}
