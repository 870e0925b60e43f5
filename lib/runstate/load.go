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

// noteSeq records the log position of one of the run's own messages, in
// order wherever it comes (a redelivery may bring an earlier event after a
// later one), once.
func (r *Run) noteSeq(seq uint64) {
	if n := len(r.seqs); n == 0 || seq > r.seqs[n-1] {
		r.seqs = append(r.seqs, seq)
		return
	}
	if i, found := slices.BinarySearch(r.seqs, seq); !found {
		r.seqs = slices.Insert(r.seqs, i, seq)
	}
}

// Seqs are the log positions of the run's own messages folded so far,
// ascending (a copy): what Replay reads again.
func (r *Run) Seqs() []uint64 { return slices.Clone(r.seqs) }

// Tally is what a reader knows from elsewhere of a run's whole history:
// how many valid events the log holds on the run's subject and the id of
// the last of them. The index projection keeps both (readmodel.IndexEntry
// Count and Last.ID).
type Tally struct {
	Count  int
	LastID string
}

// Replay folds into r, a new state, the run's messages at seqs (the Seqs of
// an earlier state of the same run), one direct get by sequence each, then
// whatever the run stored after the last of them. A reader that let a
// run's state go and kept its Seqs rebuilds it this way without a read by
// subject from the middle of the log, which makes the server walk the
// messages of other runs in between (events.ReadSeqs).
//
// The positions come from what a reader applied, which need not be every
// message of the run (an event applied before it was stored whose delivery
// never came back). So the result must match want, the run's tally from
// the index: as many valid events, the last with the same id. It reports
// false, having folded nothing, when it does not, when want is unknown
// (zero), or when a message is no longer where it was (purged, or the
// replica that answered is behind): the caller then reads the run the
// ordinary way.
func (r *Run) Replay(ctx context.Context, bus *events.Bus, skills *skill.Cache, seqs []uint64, want Tally) (bool, error) {
	if r.LastSeq != 0 || len(r.seqs) != 0 {
		return false, fmt.Errorf("replay of run %s into a state that has folded events", r.ID)
	}
	if want.Count == 0 || len(seqs) == 0 {
		return false, nil
	}
	filter := events.SubjectFilter("run", r.ID)
	// Read and check everything first: r is left as it was unless the
	// whole history is in hand.
	type folded struct {
		ev  *events.Event // nil: does not decode, skipped as CatchUp skips it
		seq uint64
	}
	var all []folded
	keep := func(raw events.RawMsg) error {
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			ev = nil
		}
		all = append(all, folded{ev, raw.Seq})
		return nil
	}
	err := events.ReadSeqs(ctx, bus.JetStream(), events.EventStream, filter, seqs, keep)
	if errors.Is(err, events.ErrSeqsChanged) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// What the run stored after the last message kept: ReadHistory asks
	// for the run's last message first (from the server's subject index),
	// and only a run that has more is read by subject from there.
	if _, err := events.ReadHistory(ctx, bus.JetStream(), events.EventStream, filter, seqs[len(seqs)-1], keep); err != nil {
		return false, err
	}
	count, lastID := 0, ""
	for _, f := range all {
		if f.ev != nil {
			count, lastID = count+1, f.ev.ID()
		}
	}
	if count != want.Count || lastID != want.LastID {
		return false, nil
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
	return true, nil
}
