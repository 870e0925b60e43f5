package runstate

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
			r.noteSeq(raw.Seq)
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

// noteSeq records the log position of one of the run's own messages.
func (r *Run) noteSeq(seq uint64) {
	if n := len(r.seqs); n == 0 || seq > r.seqs[n-1] {
		r.seqs = append(r.seqs, seq)
	}
}

// Seqs are the log positions of the run's own messages folded so far,
// ascending (a copy): what Replay reads again.
func (r *Run) Seqs() []uint64 { return slices.Clone(r.seqs) }

// Replay folds the run's messages at seqs (a Seqs of an earlier state of
// the same run) into r, a new state, with one direct get by sequence
// each, then whatever the run stored after the last of them. A reader that
// let a run's state go and kept its Seqs rebuilds it this way without a
// read by subject from the middle of the log, which makes the server walk
// the messages of other runs in between (events.ReadSeqs). It reports
// false, having folded nothing, when a message is no longer where it was
// (purged, or the replica that answered is behind): the caller loads the
// run the ordinary way.
func (r *Run) Replay(ctx context.Context, bus *events.Bus, skills *skill.Cache, seqs []uint64) (bool, error) {
	if r.LastSeq != 0 || len(r.seqs) != 0 {
		return false, fmt.Errorf("replay of run %s into a state that has folded events", r.ID)
	}
	filter := events.SubjectFilter("run", r.ID)
	// Decode and check everything first: a read that ends with
	// ErrSeqsChanged must leave r as it was.
	type folded struct {
		ev  *events.Event
		seq uint64
	}
	var all []folded
	err := events.ReadSeqs(ctx, bus.JetStream(), events.EventStream, filter, seqs, func(raw events.RawMsg) error {
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			ev = nil // skipped as CatchUp skips it; its position still counts
		}
		all = append(all, folded{ev, raw.Seq})
		return nil
	})
	if errors.Is(err, events.ErrSeqsChanged) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, f := range all {
		if f.ev == nil {
			r.LastSeq = max(r.LastSeq, f.seq)
			r.noteSeq(f.seq)
			continue
		}
		if err := r.Apply(f.ev, f.seq, skills); err != nil {
			return true, err
		}
	}
	// What the run stored after the last message kept: the server finds
	// the run's last message from its subject index, and only a run that
	// has more is read by subject from there.
	last, err := events.LastOf(ctx, bus.JetStream(), events.EventStream, filter)
	if err != nil {
		return true, err
	}
	if last != nil && last.Seq > r.LastSeq {
		return true, r.CatchUp(ctx, bus, skills)
	}
	return true, nil
}
