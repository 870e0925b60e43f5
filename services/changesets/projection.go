package changesets

import (
	"context"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/changeset"
)

// Projection keeps heed_changesets: each set folded (set.<id>), each
// agent's recent decisions (agent.<token>) and counts per tool
// (stats.<token>). OnSet, when set, sees every set it writes (the
// service's index of open sets); replay leaves it nil.
type Projection struct {
	OnSet func(command.ChangeSetState)
}

func (*Projection) Name() string      { return "changesets" }
func (*Projection) Bucket() string    { return readmodel.ChangeSetsBucket }
func (*Projection) Filters() []string { return []string{"heed.changeset.>"} }

// Apply folds one event into its set, and what it decided into the
// agent's history and counts.
func (p *Projection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	key := readmodel.ChangeSetKey(ev.Subject())
	st := changeset.New(ev.Subject())
	found, err := s.Get(ctx, key, st)
	if err != nil {
		return err
	}
	t := events.Type(ev.Type())
	if !found && t != events.ChangeSetProposed {
		return nil // a set's proposal comes first
	}
	before := make([]command.ChangeItemState, len(st.Items))
	copy(before, st.Items)
	if _, err := changeset.Apply(st, ev, 0); err != nil {
		return events.Poison(err)
	}
	st.Seq = 0 // the envelope holds the position; the value is the same in a replay
	// The agent's history and counts first, the set last: a redelivery
	// after a crash between them finds the set as it was, sees the same
	// change again and makes both writes (history and counts skip what
	// they have). The set first, the redelivery would see no change and
	// the history and counts never have it.
	if err := p.agent(ctx, s, st, before, t); err != nil {
		return err
	}
	if err := s.Put(ctx, key, st); err != nil {
		return err
	}
	if p.OnSet != nil {
		p.OnSet(*st)
	}
	return nil
}

// agent carries what changed on the set's items into the agent's history
// and counts.
func (p *Projection) agent(ctx context.Context, s events.Store, st *command.ChangeSetState, before []command.ChangeItemState, t events.Type) error {
	agent := st.Proposal.Agent
	var hist readmodel.AgentDecisions
	var stats readmodel.ChangeStats
	hkey, skey := readmodel.AgentDecisionsKey(agent), readmodel.ChangeStatsKey(agent)
	histChanged, statsChanged := false, false
	loaded := false
	load := func() error {
		if loaded {
			return nil
		}
		loaded = true
		if _, err := s.Get(ctx, hkey, &hist); err != nil {
			return err
		}
		_, err := s.Get(ctx, skey, &stats)
		hist.Agent, stats.Agent = agent, agent
		if stats.Tools == nil {
			stats.Tools = map[string]readmodel.ToolDecisions{}
		}
		return err
	}
	if t == events.ChangeSetProposed {
		if len(before) > 0 {
			return nil
		}
		if err := load(); err != nil {
			return err
		}
		for _, it := range st.Items {
			c := stats.Tools[it.Tool]
			c.Proposed++
			stats.Tools[it.Tool] = c
		}
		return s.Put(ctx, skey, stats)
	}
	for i, it := range st.Items {
		was := command.ChangeItemState{}
		if i < len(before) {
			was = before[i]
		}
		decided := was.Status == events.ItemPending && it.Status != events.ItemPending
		applied := was.Apply != it.Apply && (it.Apply == events.ApplyApplied || it.Apply == events.ApplyFailed)
		if !decided && !applied {
			continue
		}
		if err := load(); err != nil {
			return err
		}
		c := stats.Tools[it.Tool]
		if decided {
			rec := command.ChangeDecisionRecord{Set: st.ID, Item: it.Item, Subject: st.Proposal.Subject, Tool: it.Tool, Args: it.Args, Summary: it.Summary,
				Verdict: it.Status, Reason: it.Reason, By: it.By, At: it.DecidedAt}
			if it.Status == events.ItemExpired {
				rec.At = st.ExpiredAt
			}
			hist.Decisions = append(hist.Decisions, rec)
			if n := len(hist.Decisions); n > readmodel.MaxAgentDecisions {
				hist.Decisions = append([]command.ChangeDecisionRecord(nil), hist.Decisions[n-readmodel.MaxAgentDecisions:]...)
			}
			histChanged = true
			switch it.Status {
			case events.VerdictConfirmed:
				c.Confirmed++
				c.RejectedStreak = 0
			case events.VerdictRejected:
				c.Rejected++
				c.RejectedStreak++
				if it.Reason != "" {
					c.LastReason = it.Reason
				}
			case events.VerdictDeferred:
				c.Deferred++
			case events.ItemExpired:
				c.Expired++
			}
		}
		if applied {
			for j := len(hist.Decisions) - 1; j >= 0; j-- {
				r := &hist.Decisions[j]
				if r.Set == st.ID && r.Item == it.Item {
					r.Applied, r.Stale = it.Apply, it.Stale
					if it.Error != nil {
						r.Error = it.Error.Message
					}
					histChanged = true
					break
				}
			}
			if it.Apply == events.ApplyApplied {
				c.Applied++
			} else {
				c.Failed++
				if it.Stale {
					c.Stale++
				}
			}
		}
		stats.Tools[it.Tool] = c
		statsChanged = true
	}
	if histChanged {
		if err := s.Put(ctx, hkey, hist); err != nil {
			return err
		}
	}
	if statsChanged {
		return s.Put(ctx, skey, stats)
	}
	return nil
}
