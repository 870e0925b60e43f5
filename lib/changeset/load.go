package changeset

import (
	"context"
	"fmt"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
)

// VerdictSubject is the filter of a set's verdict subjects
// (heed.changeset.<id>.*), which decisions are guarded on (VerdictSeq).
func VerdictSubject(id string) string { return "heed.changeset." + id + ".*" }

// Load reads set id from the log and folds it. Seq is the set's last
// message, valid or not (the expected-sequence guard counts them all). A
// set with no proposal is not_found (the state is returned too: it may
// hold decisions written before any proposal).
func Load(ctx context.Context, bus *events.Bus, id string) (*command.ChangeSetState, error) {
	return LoadUntil(ctx, bus, id, 0)
}

// LoadUntil is Load of what the log held before sequence until (0: all).
func LoadUntil(ctx context.Context, bus *events.Bus, id string, until uint64) (*command.ChangeSetState, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid change set id", id)
	}
	st := New(id)
	_, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, events.SubjectFilter("changeset", id), 0, func(raw events.RawMsg) error {
		if until > 0 && raw.Seq >= until {
			return nil
		}
		st.Seq = max(st.Seq, raw.Seq)
		if strings.Count(raw.Subject, ".") == 3 {
			st.VerdictSeq = max(st.VerdictSeq, raw.Seq)
		}
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			return nil // dead-lettered: not part of the set
		}
		_, err = Apply(st, ev, raw.Seq)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !Proposed(st) {
		return st, &events.Error{Code: events.CodeNotFound, Message: fmt.Sprintf("no change set %q", id)}
	}
	return st, nil
}

// Refresh brings st (read before, or New) up to the log's present by
// reading only what came after st.Seq: a set read again and again (each
// decision, each result) costs the server a walk over the recent tail of
// the log, not over everything since the proposal.
func Refresh(ctx context.Context, bus *events.Bus, st *command.ChangeSetState) error {
	_, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, events.SubjectFilter("changeset", st.ID), st.Seq, func(raw events.RawMsg) error {
		st.Seq = max(st.Seq, raw.Seq)
		if strings.Count(raw.Subject, ".") == 3 {
			st.VerdictSeq = max(st.VerdictSeq, raw.Seq)
		}
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			return nil
		}
		_, err = Apply(st, ev, raw.Seq)
		return err
	})
	return err
}
