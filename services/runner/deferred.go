package runner

import (
	"fmt"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
)

// A run's calls of deferred tools (review: deferred in the tools file) are
// not made: each step completes at once with "queued for review" and the
// ids of its items, and when the run ends (completed, or failed on a step)
// the runner proposes them as the run's change set, <run-id>-cs (parts
// <run-id>-cs-p2, ... past 10 items), for a person to review
// (docs/CHANGESETS.md). A cancelled or abandoned run proposes nothing.

// deferred reports whether step i calls a deferred tool.
func (d *decider) deferred(r *runstate.Run, i int) bool {
	st := r.Skill.Steps[i]
	if st.Kind != skill.KindTool {
		return false
	}
	spec, ok := d.tools.Get(st.Tool)
	return ok && spec.Deferred()
}

// roundSet is the base id of the set the items the run queues now go to:
// <run-id>-cs, or after a retry reopened the failed run, the next round's
// (events.RunChangeSetRoundID): its earlier ends proposed theirs.
func roundSet(r *runstate.Run) string {
	return events.RunChangeSetRoundID(r.ID, r.Failures+1)
}

// queuedBefore counts the items of the current round (roundSet) that the
// run's deferred steps before step i queued.
func (d *decider) queuedBefore(r *runstate.Run, i int) int {
	base, n := roundSet(r), 0
	for j := 0; j < i && j < len(r.Steps); j++ {
		if r.Steps[j].Status == runstate.StepCompleted && d.deferred(r, j) && queuedIn(r.Steps[j].Output, base) {
			n += len(queuedIDs(r.Steps[j].Output))
		}
	}
	return n
}

// queuedIn reports whether a deferred step's output queued its items in
// the set base (or its parts).
func queuedIn(out any, base string) bool {
	m, _ := out.(map[string]any)
	set, _ := m["change_set"].(string)
	return events.InChangeSet(set, base)
}

// queuedIDs are the item ids a deferred step's output names.
func queuedIDs(out any) []any {
	m, _ := out.(map[string]any)
	ids, _ := m["items"].([]any)
	return ids
}

// queue completes a deferred step with the ids its items will have.
func (d *decider) queue(r *runstate.Run, i, attempt int, args map[string]any, em *emitter) {
	st := r.Skill.Steps[i]
	var before map[string]any
	if st.Before != nil {
		v, err := st.Before.Render(r.Env())
		if err != nil {
			em.emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Tool: st.Tool,
				Error: events.ErrorInfo{Message: "before: " + err.Error(), Kind: "template"}})
			return
		}
		before, _ = jsonable(v).(map[string]any)
	}
	items, err := changeset.Items(d.tools, []command.ProposedCall{{Tool: st.Tool, Args: args, Before: before}})
	if err != nil {
		em.emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Tool: st.Tool,
			Error: events.ErrorInfo{Message: "queue for review: " + strings.TrimPrefix(err.Error(), "call 1 ("+st.Tool+"): "), Kind: "review"}})
		return
	}
	first := d.queuedBefore(r, i)
	base := roundSet(r)
	var ids []any
	sets := map[string]bool{}
	var setList []string
	for k := range items {
		set, item := runItem(base, first+k+1)
		ids = append(ids, events.ChangeItemID(set, item))
		if !sets[set] {
			sets[set] = true
			setList = append(setList, set)
		}
	}
	out := map[string]any{"queued": true, "change_set": setList[0], "items": ids,
		"message": fmt.Sprintf("queued for review in %s (proposed when the run ends); not run", strings.Join(setList, ", "))}
	if before != nil {
		out["before"] = before // what the proposal at the run's end says the step saw
	}
	em.emit(events.RunStepCompleted, stepSuffix(i, attempt, "completed"), events.StepCompletedData{Step: st.Name, Index: i, Attempt: attempt, Output: out})
}

// runItem places the n-th item (from 1) queued in the set base: its set
// (base or a part) and number.
func runItem(base string, n int) (string, int) {
	return events.ChangeSetPartID(base, (n-1)/events.MaxChangeItems+1), (n-1)%events.MaxChangeItems + 1
}

// propose adds the proposals of the items the run queued in this round
// (none: nothing): the items queued before an earlier end (a failure a
// retry reopened) were proposed then. Their ids are fixed
// (<set-id>/proposed), so deciding the end again after a crash proposes
// nothing twice.
func (d *decider) propose(r *runstate.Run, em *emitter) {
	base := roundSet(r)
	var calls []command.ProposedCall
	for i := range r.Steps {
		if r.Steps[i].Status == runstate.StepCompleted && d.deferred(r, i) && len(queuedIDs(r.Steps[i].Output)) > 0 && queuedIn(r.Steps[i].Output, base) {
			out, _ := r.Steps[i].Output.(map[string]any)
			before, _ := out["before"].(map[string]any)
			calls = append(calls, command.ProposedCall{Tool: r.Skill.Steps[i].Tool, Args: r.Steps[i].Args, Before: before})
		}
	}
	if len(calls) == 0 {
		return
	}
	items, err := changeset.Items(d.tools, calls)
	if err != nil {
		d.log.Error("rebuild the run's queued items", "run", r.ID, "err", err)
		return
	}
	agent := r.Agent
	if agent == "" {
		agent = r.RequestedBy
	}
	if agent == "" {
		agent = "heed/runner"
	}
	ids, parts := changeset.Parts(base, items)
	expiry := d.changeSetExpiry
	if expiry <= 0 {
		expiry = events.DefaultChangeSetExpiry
	}
	req := &command.ProposeChangeSet{Agent: agent, Subject: "skill:" + r.SkillName, Wake: r.ID, RunID: r.ID, Title: "run " + r.ID + " of " + r.SkillName, ProposedBy: Source}
	for k, data := range changeset.Proposals(req, ids, parts, em.now.Add(expiry)) {
		ev, err := events.NewEvent(events.ChangeSetProposed, ids[k], ids[k]+"/proposed", Source, data)
		if err != nil {
			d.log.Error("build event", "type", events.ChangeSetProposed, "err", err)
			return
		}
		em.other(ev)
	}
}
