package events

import (
	"time"

	"github.com/nats-io/nats.go"
)

// RawMsg is a stored message as read back from the log (by direct get or an
// ordered consumer), before decoding.
type RawMsg struct {
	Subject string
	Header  nats.Header
	Data    []byte
	Seq     uint64
	Stored  time.Time // when the stream stored it
}

// Msg returns the NATS message form.
func (r RawMsg) Msg() *nats.Msg { return &nats.Msg{Subject: r.Subject, Header: r.Header, Data: r.Data} }
