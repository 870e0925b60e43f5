package changesets

import (
	"context"
	"encoding/json"

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
	value, err := setJSON(st)
	if err != nil {
		return err
	}
	if err := s.Put(ctx, key, value); err != nil {
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
			args, cut := historyArgs(it.Args)
			rec := command.ChangeDecisionRecord{Set: st.ID, Item: it.Item, Subject: st.Proposal.Subject, Tool: it.Tool, Args: args, ArgsTruncated: cut || it.ArgsTruncated, Summary: it.Summary,
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
		b, err := historyJSON(hist)
		if err != nil {
			return err
		}
		if err := s.Put(ctx, hkey, b); err != nil {
			return err
		}
	}
	if statsChanged {
		return s.Put(ctx, skey, stats)
	}
	return nil
}

// An agent's history is one value, rewritten by each of its decisions,
// and a bucket value is at most events.MaxValueSize (1 MiB): the newest
// MaxAgentDecisions records with their items' args whole would pass it
// with an agent whose items carry documents (200 items of 10 KB), and
// from then on every write of the agent's history and counts failed and
// its decisions went to the dead letters. So a record keeps an item's
// args up to maxHistoryArgs bytes of JSON: above, each value longer than
// maxHistoryValue becomes the start of its text (the keys and the short
// values stay, which is what the history's lines show), or, with too many
// keys for that, the whole becomes {"preview": ...}; ArgsTruncated says
// so, and the set's own key keeps the args whole. The oldest records go
// first while the history is above maxHistoryBytes.
const (
	maxHistoryArgs  = 2 << 10
	maxHistoryValue = 200
	maxHistoryBytes = 768 << 10
)

// historyArgs is a decided item's args as its agent's history keeps them.
func historyArgs(args map[string]any) (map[string]any, bool) {
	return changeset.CutArgs(args, maxHistoryArgs, maxHistoryValue)
}

// setJSON is a set as heed_changesets keeps it: whole, or fitted under a
// value's limit (changeset.Fit) when its args, reasons and results are
// too large together; the log keeps it whole. Encoded once.
func setJSON(st *command.ChangeSetState) (json.RawMessage, error) {
	b, err := json.Marshal(st)
	if err != nil || len(b) <= changeset.MaxStateBytes {
		return b, err
	}
	cp := changeset.Clone(st)
	changeset.Fit(cp, changeset.MaxStateBytes)
	return json.Marshal(cp)
}

// historyJSON is the history as it is written: encoded once, and again
// only when its oldest records must go (fitHistory).
func historyJSON(h readmodel.AgentDecisions) (json.RawMessage, error) {
	b, err := json.Marshal(h)
	if err != nil || len(b) <= maxHistoryBytes {
		return b, err
	}
	h.Decisions = fitHistory(h.Decisions)
	return json.Marshal(h)
}

// fitHistory drops the oldest records while the history's JSON is above
// maxHistoryBytes (it keeps the newest, however large).
func fitHistory(recs []command.ChangeDecisionRecord) []command.ChangeDecisionRecord {
	sizes := make([]int, len(recs))
	total := 0
	for i := range recs {
		b, _ := json.Marshal(recs[i])
		sizes[i] = len(b) + 1
		total += sizes[i]
	}
	drop := 0
	for total > maxHistoryBytes && drop < len(recs)-1 {
		total -= sizes[drop]
		drop++
	}
	if drop == 0 {
		return recs
	}
	return append([]command.ChangeDecisionRecord(nil), recs[drop:]...)
}
