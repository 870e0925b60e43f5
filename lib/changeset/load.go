package changeset

import (
	"context"
	"fmt"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
)

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
