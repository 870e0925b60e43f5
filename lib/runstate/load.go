package runstate

import (
	"context"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/skill"
)

// Load folds a run's whole history from the log. A run with no events is
// an empty state with LastSeq 0.
func Load(ctx context.Context, bus *events.Bus, id string, skills *skill.Cache) (*Run, error) {
	r := New(id)
	return r, r.CatchUp(ctx, bus, skills)
}

// CatchUp folds the run's events stored after LastSeq. Every message
// counts for LastSeq, valid or not (the stream's expected-sequence check
// counts them all); one that does not decode is skipped: the indexer has
// dead-lettered it.
func (r *Run) CatchUp(ctx context.Context, bus *events.Bus, skills *skill.Cache) error {
	return r.CatchUpEach(ctx, bus, skills, nil)
}

// CatchUpEach is CatchUp calling each (if not nil) with every event once
// it is folded, and its position in the log.
func (r *Run) CatchUpEach(ctx context.Context, bus *events.Bus, skills *skill.Cache, each func(ev *events.Event, seq uint64) error) error {
	_, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, events.SubjectFilter("run", r.ID), r.LastSeq, func(raw events.RawMsg) error {
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			r.LastSeq = max(r.LastSeq, raw.Seq)
			return nil
		}
		if err := r.Apply(ev, raw.Seq, skills); err != nil {
			return err
		}
		if each != nil {
			return each(ev, raw.Seq)
		}
		return nil
	})
	return err
}
