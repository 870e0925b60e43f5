package events

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dead-letter headers. The original headers are kept as they were, except
// that NATS' own control headers (Nats-*) are renamed Heed-Orig-Nats-* so
// they cannot act again on the dead-letter stream.
const (
	HeaderDLQCode     = "Heed-Dlq-Code"
	HeaderDLQReason   = "Heed-Dlq-Reason"
	HeaderDLQStream   = "Heed-Dlq-Stream"
	HeaderDLQSeq      = "Heed-Dlq-Seq"
	HeaderDLQSubject  = "Heed-Dlq-Subject"
	HeaderDLQConsumer = "Heed-Dlq-Consumer"
	HeaderDLQTime     = "Heed-Dlq-Time"
	maxReasonLen      = 2000
)

// DLQSubject is where a bad message from subject goes:
// heed.run.x.step.failed → heed.dlq.run.x.step.failed.
func DLQSubject(subject string) string {
	rest, ok := strings.CutPrefix(subject, Prefix+".")
	if !ok {
		rest = "other." + subject
	}
	return DLQPrefix + "." + rest
}

// DeadLetter is one message that could not be processed.
type DeadLetter struct {
	Subject  string      // original subject
	Header   nats.Header // original headers
	Data     []byte      // original bytes
	Stream   string
	Seq      uint64 // stream sequence of the original; makes the dead letter's id deterministic
	Consumer string
	Code     Code
	Reason   string
	// ID is the dead letter's Nats-Msg-Id when the original has no stream
	// position (a command, which no stream captures); empty: derived from
	// Stream and Seq.
	ID string
}

// Message builds the dead-letter message. Its Nats-Msg-Id derives from the
// original's stream position, so every consumer that rejects the same
// message produces one dead letter, not one each.
func (d DeadLetter) Message(now time.Time) *nats.Msg {
	h := make(nats.Header, len(d.Header)+8)
	for k, v := range d.Header {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			k = "Heed-Orig-" + k
		}
		h[k] = append([]string(nil), v...)
	}
	h.Set(HeaderDLQCode, string(d.Code))
	h.Set(HeaderDLQReason, headerSafe(d.Reason))
	if d.Stream != "" {
		// A command has no stream position: no stream, no sequence.
		h.Set(HeaderDLQStream, d.Stream)
		h.Set(HeaderDLQSeq, strconv.FormatUint(d.Seq, 10))
	}
	h.Set(HeaderDLQSubject, d.Subject)
	h.Set(HeaderDLQConsumer, d.Consumer)
	h.Set(HeaderDLQTime, now.UTC().Format(time.RFC3339Nano))
	id := d.ID
	if id == "" {
		id = "dlq:" + d.Stream + ":" + strconv.FormatUint(d.Seq, 10)
	}
	h.Set(HeaderMsgID, id)
	return &nats.Msg{Subject: DLQSubject(d.Subject), Header: h, Data: d.Data}
}

// SendDeadLetter writes d to the dead-letter stream and waits for the ack.
func SendDeadLetter(ctx context.Context, js jetstream.JetStream, d DeadLetter) error {
	_, err := js.PublishMsg(ctx, d.Message(time.Now()))
	if err != nil {
		return classifyPublishError(DLQSubject(d.Subject), err)
	}
	return nil
}

// DeadLetter writes d to the dead-letter stream, waits for the ack and
// counts it with the bus's observer (under d.Consumer and d.Code).
func (b *Bus) DeadLetter(ctx context.Context, d DeadLetter) error {
	if err := SendDeadLetter(ctx, b.js, d); err != nil {
		return err
	}
	if b.obs != nil {
		b.obs.DeadLettered(d.Consumer, d.Code)
	}
	return nil
}

// headerSafe makes a reason fit in one header value: no CR/LF or other
// control characters, bounded length.
func headerSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			r = ' '
		}
		b.WriteRune(r)
		if b.Len() >= maxReasonLen {
			b.WriteString("…")
			break
		}
	}
	return b.String()
}
