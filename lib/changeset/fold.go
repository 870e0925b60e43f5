// Package changeset folds a change set's events into its state
// (command.ChangeSetState) with the rule every reader applies to
// decisions — the first valid decision of an item in log order takes
// effect — and builds the items of a proposal from tool calls (exploding
// batch calls, writing summaries, splitting into parts). The changesets
// service, the runner, the client and heed itself read change sets
// through it, so they cannot disagree on what was decided.
package changeset

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
)

// New is the state of set id before any event.
func New(id string) *command.ChangeSetState {
	return &command.ChangeSetState{ID: id}
}

// ProposalOf is a set's proposal as it was proposed: its items are the
// state's Items (the state keeps them once, not in Proposal.Items).
func ProposalOf(st *command.ChangeSetState) events.ChangeSetProposedData {
	d := st.Proposal
	d.Items = make([]events.ChangeItem, len(st.Items))
	for i := range st.Items {
		d.Items[i] = st.Items[i].ChangeItem
	}
	return d
}

// Proposed reports whether the set exists (its proposal was folded).
func Proposed(st *command.ChangeSetState) bool { return st.Status != "" }

// Open reports whether items of the set may still be decided.
func Open(st *command.ChangeSetState) bool {
	return st.Status == events.SetPending || st.Status == events.SetPartiallyResolved
}

// Item returns item n of the set, or nil.
func Item(st *command.ChangeSetState, n int) *command.ChangeItemState {
	if n < 1 || n > len(st.Items) {
		return nil
	}
	return &st.Items[n-1]
}

// Apply folds one event of the set's aggregate (stored at seq, at time
// ev.Time()) into st. For a decided event it returns the decisions that
// did not take effect, with why; the others are in st.
func Apply(st *command.ChangeSetState, ev *events.Event, seq uint64) ([]events.ChangeRefusal, error) {
	t := events.Type(ev.Type())
	if t.Kind() != "changeset" {
		return nil, nil
	}
	if seq > st.Seq {
		st.Seq = seq
	}
	decode := func(v any) error {
		if err := json.Unmarshal(ev.Data(), v); err != nil {
			return fmt.Errorf("%s %s: %w", t, ev.ID(), err)
		}
		return nil
	}
	at := ev.Time().UTC()
	switch t {
	case events.ChangeSetProposed:
		if Proposed(st) {
			return nil, nil // a set is proposed once; a second proposal changes nothing
		}
		var d events.ChangeSetProposedData
		if err := decode(&d); err != nil {
			return nil, err
		}
		st.Items = make([]command.ChangeItemState, len(d.Items))
		for i, it := range d.Items {
			it.Item = i + 1 // numbered by position, whatever the writer said
			st.Items[i] = command.ChangeItemState{ChangeItem: it, Status: events.ItemPending}
		}
		// The items are the state's Items: kept once (a proposal may be
		// 900 KiB, and the state is stored and sent whole).
		d.Items = []events.ChangeItem{}
		st.Proposal, st.ProposedAt = d, at
		st.Status = events.SetPending
	case events.ChangeSetDecided:
		var d events.ChangeSetDecidedData
		if err := decode(&d); err != nil {
			return nil, err
		}
		return Decide(st, ev.ID(), &d, at), nil
	case events.ChangeSetExpired:
		if !Open(st) {
			return nil, nil
		}
		for i := range st.Items {
			if st.Items[i].Status == events.ItemPending {
				st.Items[i].Status = events.ItemExpired
			}
		}
		st.ExpiredAt = at
		st.Status = events.SetExpired
	case events.ChangeApplyStarted, events.ChangeApplyCompleted, events.ChangeApplyFailed:
		var d struct {
			Item    int `json:"item"`
			Attempt int `json:"attempt"`
		}
		if err := decode(&d); err != nil {
			return nil, err
		}
		it := Item(st, d.Item)
		if it == nil || it.Status != events.VerdictConfirmed || it.Apply == events.ApplyApplied || it.Apply == events.ApplyFailed {
			return nil, nil // only a confirmed item is applied, and once
		}
		it.Attempts = max(it.Attempts, d.Attempt)
		switch t {
		case events.ChangeApplyStarted:
			it.Apply = events.ApplyApplying
		case events.ChangeApplyCompleted:
			var c events.ChangeApplyCompletedData
			if err := decode(&c); err != nil {
				return nil, err
			}
			it.Apply, it.Output, it.AppliedAt = events.ApplyApplied, c.Output, at
		case events.ChangeApplyFailed:
			var f events.ChangeApplyFailedData
			if err := decode(&f); err != nil {
				return nil, err
			}
			it.Apply, it.Error, it.Stale, it.AppliedAt = events.ApplyFailed, &f.Error, f.Stale, at
		}
	case events.ChangeSetRefused:
		var d events.ChangeSetRefusedData
		if err := decode(&d); err == nil {
			st.Refused += len(d.Refused)
		}
	}
	return nil, nil
}

// Decide judges one decided event (id, at) against st and applies what
// takes effect: per decision, in order, the item must exist and be
// pending, the set open and the decider one of its reviewers (if it names
// any). It returns the refusals.
func Decide(st *command.ChangeSetState, id string, d *events.ChangeSetDecidedData, at time.Time) []events.ChangeRefusal {
	var refused []events.ChangeRefusal
	for _, dec := range d.Decisions {
		if r := judge(st, d.By, dec); r != nil {
			refused = append(refused, *r)
			continue
		}
		it := Item(st, dec.Item)
		it.Status, it.Reason, it.By, it.Channel, it.DecidedAt, it.DecisionID = dec.Verdict, dec.Reason, d.By, d.Channel, at, id
	}
	if Proposed(st) && st.Status != events.SetExpired {
		st.Status = status(st)
	}
	return refused
}

// Judge says why a decision would not take effect now (nil: it would).
func Judge(st *command.ChangeSetState, by string, dec events.ChangeDecision) *events.ChangeRefusal {
	return judge(st, by, dec)
}

func judge(st *command.ChangeSetState, by string, dec events.ChangeDecision) *events.ChangeRefusal {
	refuse := func(code, reason string) *events.ChangeRefusal {
		return &events.ChangeRefusal{Item: dec.Item, Verdict: dec.Verdict, Code: code, Reason: reason}
	}
	switch {
	case !Proposed(st):
		return refuse(events.ChangeRefusedNoProposal, fmt.Sprintf("change set %s has no proposal", st.ID))
	case Item(st, dec.Item) == nil:
		return refuse(events.ChangeRefusedNoItem, fmt.Sprintf("change set %s has no item %d (it has %d)", st.ID, dec.Item, len(st.Items)))
	case st.Status == events.SetExpired:
		return refuse(events.ChangeRefusedExpired, fmt.Sprintf("change set %s expired at %s: its pending items are no decision", st.ID, st.ExpiredAt.Format(time.RFC3339)))
	case len(st.Proposal.Reviewers) > 0 && !slices.Contains(st.Proposal.Reviewers, by):
		return refuse(events.ChangeRefusedNotAllowed, fmt.Sprintf("%s may not decide change set %s: its reviewers are %v", by, st.ID, st.Proposal.Reviewers))
	}
	it := Item(st, dec.Item)
	if it.Status != events.ItemPending {
		r := refuse(events.ChangeRefusedDecided, fmt.Sprintf("item %d of %s was already %s by %s", dec.Item, st.ID, it.Status, it.By))
		r.Winner = &events.ChangeDecisionRef{EventID: it.DecisionID, Verdict: it.Status, By: it.By, Channel: it.Channel, At: it.DecidedAt}
		return r
	}
	return nil
}

// status is the set's status from its items (not expired).
func status(st *command.ChangeSetState) string {
	pending := 0
	for _, it := range st.Items {
		if it.Status == events.ItemPending {
			pending++
		}
	}
	switch pending {
	case len(st.Items):
		return events.SetPending
	case 0:
		return events.SetResolved
	}
	return events.SetPartiallyResolved
}

// Pending lists the numbers of the items still pending.
func Pending(st *command.ChangeSetState) []int {
	var out []int
	for _, it := range st.Items {
		if it.Status == events.ItemPending {
			out = append(out, it.Item)
		}
	}
	return out
}

// ToApply lists the confirmed items not applied yet (in item order): the
// ones never started, and the ones started without a result (after a
// crash: called again with the same idempotency key).
func ToApply(st *command.ChangeSetState) []int {
	var out []int
	for _, it := range st.Items {
		if it.Status == events.VerdictConfirmed && it.Apply != events.ApplyApplied && it.Apply != events.ApplyFailed {
			out = append(out, it.Item)
		}
	}
	return out
}
