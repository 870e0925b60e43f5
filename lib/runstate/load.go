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
	_, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, events.SubjectFilter("run", r.ID), r.LastSeq, func(raw events.RawMsg) error {
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			r.LastSeq = max(r.LastSeq, raw.Seq)
			return nil
		}
		return r.Apply(ev, raw.Seq, skills)
	})
	return err
}
