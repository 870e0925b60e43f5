package confirmation

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/heedhq/heed/events"
)

// LoadAnswerVerdict is LoadVerdictsAt for a reader that was delivered the
// answer ev to confirmation ev.Subject() (stored at seq, with the headers
// it was stored with): the
// state a judgment of that answer needs, in one read when the log proves
// the answer was the first message on the confirmation after its
// request, in the reads LoadVerdictsAt makes otherwise.
//
// The proof is the answer's own guard. Every router writes an answer
// with Nats-Expected-Last-Subject-Sequence over heed.confirm.<id>.>, and
// the server stored it only because the confirmation's last message was
// then at that sequence, S. If the confirmation's first request is stored
// at S, nothing came between the question and this answer, and what came
// before the question does not change a gate (answers and expiries before
// a request are refused or ignored; the first request is the question).
// So the gate at the answer is the request's alone, and the verdict is
// the one a full read gives. Anything else (no guard, another subject in
// it, a request that is not at S, a read that fails) takes the full read.
func LoadAnswerVerdict(ctx context.Context, bus *events.Bus, ev *events.Event, seq uint64, hdr nats.Header) (*State, error) {
	if st := answerAfterRequest(ctx, bus, ev, seq, hdr); st != nil {
		return st, nil
	}
	return LoadVerdictsAt(ctx, bus, ev.Subject(), seq)
}

// answerAfterRequest is LoadAnswerVerdict's one-read path; nil when the
// log does not prove its case.
func answerAfterRequest(ctx context.Context, bus *events.Bus, ev *events.Event, seq uint64, hdr nats.Header) *State {
	id := ev.Subject()
	if events.Type(ev.Type()) != events.ConfirmAnswered || !events.ValidID(id) {
		return nil
	}
	if hdr.Get(jetstream.ExpectedLastSubjSeqSubjHeader) != events.SubjectFilter("confirm", id) {
		return nil
	}
	after, err := strconv.ParseUint(hdr.Get(jetstream.ExpectedLastSubjSeqHeader), 10, 64)
	if err != nil || after == 0 || after >= seq {
		return nil
	}
	// The first request: a literal subject, found from the subject index.
	raw, _, err := events.FirstOf(ctx, bus.JetStream(), events.EventStream, events.ConfirmRequested.Subject(id), 0)
	if err != nil || raw == nil || raw.Seq != after {
		return nil
	}
	req, err := bus.Codec().DecodeStored(*raw)
	if err != nil {
		return nil // dead-lettered: the question is a later request
	}
	st := New(id)
	if _, err := st.Apply(req, raw.Seq); err != nil || st.Request == nil {
		return nil
	}
	if _, err := st.Apply(ev, seq); err != nil {
		return nil
	}
	return st
}
