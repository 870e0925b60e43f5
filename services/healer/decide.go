package healer

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/heedhq/heed/lib/tool"
)

// The healer's decisions: what healing does next for a failed attempt, and
// what a later successful attempt teaches, as functions of the run's state
// (lib/runstate), the learned fixes, the configuration and the clock.
// Nothing here performs an effect: the service runs the fix tools and
// publishes the events. Golden histories (testdata/*.jsonl) replay this
// code without a server.

// Fixes is the learned state the healer consults: the learned fixes of a
// tool, in any order (the decision sorts them).
type Fixes interface {
	ForTool(tool string) []readmodel.Fix
}

// Decision is what healing does next: events to publish, in order, and
// at most one fix tool to run before deciding again.
type Decision struct {
	Events []events.Event
	RunFix *FixCall
}

// FixCall is a fix tool to run for a failed attempt.
type FixCall struct {
	Fix  events.FixRef
	Call tool.Call
}

// decider holds what healing's decisions depend on that does not change.
type decider struct {
	rules *Rules
	tools *tool.Registry
	fixes Fixes
}

// heal decides the next stages of healing one failed attempt. It picks up
// where a crashed healer left off: every stage is in the run's log, and a
// stage already there is not decided again. The events it returns are
// applied to r.
func (d *decider) heal(r *runstate.Run, f *events.StepFailedData, now time.Time) Decision {
	var out Decision
	publish := func(t events.Type, data any) bool {
		ev, err := stage(r.ID, f.Index, f.Attempt, t, data, now)
		if err != nil {
			return false
		}
		_ = r.Apply(&ev, 0, nil) // our own event decodes
		out.Events = append(out.Events, ev)
		return true
	}
	giveUp := func(reason, fixID string) Decision {
		publish(events.HealGaveUp, events.HealGaveUpData{Step: f.Step, Index: f.Index, Attempt: f.Attempt, Reason: reason, FixID: fixID})
		return out
	}
	a := r.Attempt(f.Index, f.Attempt)
	// An attempt the fold does not hold as failed (a second writer's
	// failure of an attempt that had completed) is not the healer's to heal:
	// the fold would ignore every stage written for it.
	if a == nil || a.Failed == nil || r.Terminal() || a.Decided() {
		return out
	}
	if later := r.Attempt(f.Index, f.Attempt+1); later != nil && later.Started != nil && a.Triggered == nil {
		// Already retried (an agent driving its own run corrected it before
		// the healer got to it): there is nothing left to heal.
		return out
	}
	// The previous attempt was a heal with a fix that did not work.
	if prev, ok := retryFix(r, f.Index, f.Attempt); ok && prev.Retry.FixID != "" && a.Triggered == nil {
		return giveUp(fmt.Sprintf("the learned fix %s did not heal it", prev.Retry.FixID), prev.Retry.FixID)
	}
	if n := r.HealRetries(f.Index); n >= d.rules.MaxHeals && a.Triggered == nil {
		return giveUp(fmt.Sprintf("healed %d times and still failing", n), "")
	}
	if a.Triggered == nil {
		tr := d.plan(r, f)
		tr.HealAttempt = r.HealRetries(f.Index) + 1
		if !publish(events.HealTriggered, tr) {
			return out
		}
	}
	tr := a.Triggered
	if tr == nil {
		return out // the fold refused the trigger: nothing to build on
	}
	switch tr.Plan {
	case events.PlanGiveUp:
		return giveUp("no fix is known for this error and the run has no agent to ask", "")
	case events.PlanAgent:
		publish(events.HealEscalated, events.HealEscalatedData{
			Step: f.Step, Index: f.Index, Attempt: f.Attempt, Agent: r.Agent,
			Context: map[string]any{
				"skill": r.SkillName, "step": f.Step, "tool": f.Tool, "args": f.Args, "error": f.Error.Message,
				"classification": tr.Classification.Kind, "recent_steps": r.Recent,
			},
			Question: fmt.Sprintf("%s failed with %q. Retry with corrected args (heed retry %s --arg key=value) or let on_error apply (heed continue %s).", f.Tool, textutil.FirstLine(f.Error.Message, 300), r.ID, r.ID),
		})
		return out
	}
	// A fix: run its tool (if any), then ask for the next attempt.
	fix := tr.Fix
	if fix.Tool != "" {
		if a.FixApplied == nil {
			out.RunFix = &FixCall{Fix: *fix, Call: tool.Call{Tool: fix.Tool, Args: fix.Args, RunID: r.ID, Step: f.Step, Attempt: f.Attempt,
				IdempotencyKey: fmt.Sprintf("%s/heal/%d/%d", r.ID, f.Index, f.Attempt)}}
			return out
		}
		if applied := a.FixApplied; !applied.OK {
			msg := "it failed"
			if applied.Error != nil {
				msg = applied.Error.Message
			}
			return giveUp(fmt.Sprintf("the fix %s failed: %s", fix.Tool, msg), fix.FixID)
		}
	}
	args, err := correctedArgs(f, fix)
	if err != nil {
		return giveUp("the fix's corrected args did not render: "+err.Error(), fix.FixID)
	}
	publish(events.HealRetried, events.HealRetriedData{Step: f.Step, Index: f.Index, Attempt: f.Attempt, NextAttempt: f.Attempt + 1,
		Args: args, FixID: fix.FixID, Reason: fix.Description})
	return out
}

// fixApplied is the event of a fix tool's result.
func fixApplied(r *runstate.Run, f *events.StepFailedData, fc *FixCall, res tool.Result, now time.Time) (events.Event, error) {
	applied := events.HealFixAppliedData{Step: f.Step, Index: f.Index, Attempt: f.Attempt, Fix: fc.Fix, OK: res.Err == nil, DurationMS: float64(res.Duration.Microseconds()) / 1000}
	if res.Err != nil {
		applied.Error = &events.ErrorInfo{Message: res.Err.Message, Kind: res.Err.Kind, ExitCode: res.Err.ExitCode}
	} else if out, err := json.Marshal(res.Output); err == nil && len(out) < 4096 {
		applied.Output = res.Output
	}
	return stage(r.ID, f.Index, f.Attempt, events.HealFixApplied, applied, now)
}

// stage builds one heal event of a failed attempt, with a deterministic id.
func stage(run string, index, attempt int, t events.Type, data any, now time.Time) (events.Event, error) {
	verb := strings.TrimPrefix(string(t), "heed.run.heal.")
	ev, err := events.NewEvent(t, run, fmt.Sprintf("%s/s%d/a%d/heal/%s", run, index, attempt, verb), Source, data)
	ev.SetTime(now)
	return ev, err
}

// retryFix is the heal that asked for attempt n of a step, if any: the
// previous attempt, whose heal.retried asked for it, and whether attempt n
// runs with the args it asked for.
func retryFix(r *runstate.Run, index, n int) (*runstate.Attempt, bool) {
	a, prev := r.Attempt(index, n), r.Attempt(index, n-1)
	if a == nil || a.Started == nil || prev == nil || prev.Retry == nil {
		return nil, false
	}
	return prev, sameArgs(a.Started.Args, prev.Retry.Args)
}

// plan classifies the failure and chooses: a learned fix beats a generic
// pattern; an unknown error goes to the run's agent.
func (d *decider) plan(r *runstate.Run, f *events.StepFailedData) *events.HealTriggeredData {
	sig := events.ErrorSignature(f.Error.Message)
	tr := &events.HealTriggeredData{Step: f.Step, Index: f.Index, Attempt: f.Attempt, Tool: f.Tool, Error: f.Error,
		Classification: events.Classification{Kind: "unknown", Signature: sig}}
	p := d.rules.Classify(f.Error.Message)
	if p != nil {
		tr.Classification.Kind, tr.Classification.Pattern = p.Kind, strings.Join(p.Match, "|")
	}
	if fx, ok := d.learnedFix(f, sig); ok {
		tr.Plan = events.PlanLearnedFix
		ref := &events.FixRef{FixID: fx.ID, Source: "learned", ArgsPatch: fx.ArgsPatch, Description: fx.Description}
		if fx.Action != nil {
			ref.Tool, ref.Args = fx.Action.Tool, fx.Action.Args
		}
		tr.Fix = ref
		if tr.Classification.Kind == "unknown" {
			tr.Classification.Kind = "learned"
		}
		return tr
	}
	if p != nil && p.Fix != nil {
		if _, ok := d.tools.Get(p.Fix.Tool); ok {
			spec, _ := d.tools.Get(f.Tool)
			toolCluster := ""
			if spec != nil {
				toolCluster = spec.Cluster
			}
			env := map[string]any{"args": f.Args, "error": f.Error.Message, "tool": f.Tool,
				"cluster": d.rules.Cluster(f.Tool, toolCluster, f.Error.Message+" "+fmt.Sprint(f.Output))}
			args := map[string]any{}
			for k, t := range p.args {
				if val, err := t.Render(env); err == nil {
					args[k] = val
				}
			}
			tr.Plan = events.PlanPatternFix
			tr.Fix = &events.FixRef{Source: "pattern", Tool: p.Fix.Tool, Args: args, Description: fmt.Sprintf("%s error: run %s, then retry", p.Kind, p.Fix.Tool)}
			return tr
		}
	}
	if r.Agent != "" {
		tr.Plan = events.PlanAgent
		return tr
	}
	tr.Plan = events.PlanGiveUp
	return tr
}

// learnedFix finds a usable learned fix for the failure: one for this
// exact signature first, then one whose match text the error contains;
// among those, the most confident, then by id.
func (d *decider) learnedFix(f *events.StepFailedData, sig string) (readmodel.Fix, bool) {
	if d.fixes == nil {
		return readmodel.Fix{}, false
	}
	msg := strings.ToLower(f.Error.Message)
	var candidates []readmodel.Fix
	for _, fx := range d.fixes.ForTool(f.Tool) {
		if fx.Tool != f.Tool || !fx.Usable() {
			continue
		}
		if fx.ErrorPattern == sig || (fx.Match != "" && strings.Contains(msg, strings.ToLower(fx.Match))) {
			candidates = append(candidates, fx)
		}
	}
	sort.Slice(candidates, func(i, j int) bool {
		ei, ej := candidates[i].ErrorPattern == sig, candidates[j].ErrorPattern == sig
		if ei != ej {
			return ei
		}
		if candidates[i].Confidence != candidates[j].Confidence {
			return candidates[i].Confidence > candidates[j].Confidence
		}
		return candidates[i].ID < candidates[j].ID
	})
	for _, fx := range candidates {
		if applicable(fx, f.Args) {
			return fx, true
		}
	}
	return readmodel.Fix{}, false
}

// applicable: a value learned from one run's correction applies only to a
// failure with the same failed value (a corrected SHA is right for that
// SHA, not for every SHA).
func applicable(fx readmodel.Fix, args map[string]any) bool {
	for k, was := range fx.WhenWas {
		if !reflect.DeepEqual(normalizeJSON(args[k]), normalizeJSON(was)) {
			return false
		}
	}
	return true
}

func normalizeJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// correctedArgs applies a fix's args patch to the failed args. Patch values
// may be templates over args and error.
func correctedArgs(f *events.StepFailedData, fix *events.FixRef) (map[string]any, error) {
	args := map[string]any{}
	for k, v := range f.Args {
		args[k] = v
	}
	env := map[string]any{"args": f.Args, "error": f.Error.Message, "tool": f.Tool, "cluster": nil}
	for k, v := range fix.ArgsPatch {
		s, ok := v.(string)
		if !ok || !strings.Contains(s, "{{") {
			args[k] = v
			continue
		}
		t, err := skill.CompileTemplate(s, skill.Pos{File: "fix " + fix.FixID}, skill.FixPatchNames)
		if err != nil {
			return nil, err
		}
		out, err := t.Render(env)
		if err != nil {
			return nil, err
		}
		args[k] = out
	}
	return args, nil
}

// learn decides what a successful later attempt teaches: a heal that
// worked, or an agent's (or person's) corrected retry, which becomes a
// learned fix for that tool and error. completedID is the id of the
// step.completed event.
func learn(r *runstate.Run, c *events.StepCompletedData, completedID string, now time.Time) ([]events.Event, error) {
	cur, prev := r.Attempt(c.Index, c.Attempt), r.Attempt(c.Index, c.Attempt-1)
	if cur == nil || cur.Started == nil || prev == nil || prev.Failed == nil || cur.Healed {
		return nil, nil
	}
	sig := events.ErrorSignature(prev.Failed.Error.Message)
	healed := func(via, fixID string) (events.Event, error) {
		return stage(r.ID, c.Index, c.Attempt, events.HealHealed, events.HealHealedData{Step: c.Step, Index: c.Index, Attempt: c.Attempt, Via: via, FixID: fixID, Tool: prev.Failed.Tool, Signature: sig}, now)
	}
	if prev.Retry != nil && sameArgs(cur.Started.Args, prev.Retry.Args) {
		// The attempt the healer asked for.
		via := events.PlanPatternFix
		if prev.Triggered != nil && prev.Triggered.Plan == events.PlanLearnedFix {
			via = events.PlanLearnedFix
		}
		ev, err := healed(via, prev.Retry.FixID)
		if err != nil {
			return nil, err
		}
		out := []events.Event{ev}
		// The attempt the healer retried may itself have been an agent's
		// or a person's correction of the failure before it, which failed
		// only for a reason the heal took away (a token that expired, the
		// network): with the same args, the heal's success proves the
		// correction too, and it is learned as if it had succeeded at
		// once.
		if pp := r.Attempt(c.Index, c.Attempt-2); pp != nil && pp.Failed != nil && prev.Started != nil && sameArgs(cur.Started.Args, prev.Started.Args) &&
			(pp.Retry == nil || !sameArgs(prev.Started.Args, pp.Retry.Args)) {
			learned, err := correctionFix(r, c.Index, prev, pp, completedID, now)
			if err != nil {
				return nil, err
			}
			if learned != nil {
				out = append([]events.Event{*learned}, out...)
			}
		}
		return out, nil
	}
	learned, err := correctionFix(r, c.Index, cur, prev, completedID, now)
	if err != nil || learned == nil {
		return nil, err
	}
	ev, err := healed(events.PlanAgent, "")
	if err != nil {
		return nil, err
	}
	return []events.Event{*learned, ev}, nil
}

// correctionFix is the fix an attempt (corrected) that came after a failed
// one (failed) teaches, or nil when it is no correction. Any attempt after
// a failure is a retry of it: by the runner's on_error (the same args:
// nothing to learn) or a correction by an agent or a person
// (heed.cmd.run.retry, or an outside agent's own step.started with
// retry_of), which teaches a fix. completedID is the id of the
// step.completed that proved it.
func correctionFix(r *runstate.Run, index int, corrected, failed *runstate.Attempt, completedID string, now time.Time) (*events.Event, error) {
	if rof := corrected.Started.RetryOf; rof != "" && rof != failed.FailedID && rof != "retry" {
		return nil, nil // names another attempt: not a correction of this failure
	}
	failedArgs := failed.Failed.Args
	if failedArgs == nil && failed.Started != nil {
		failedArgs = failed.Started.Args // an outside agent's failure may not repeat them
	}
	patch, was := diff(failedArgs, corrected.Started.Args)
	if len(patch) == 0 {
		return nil, nil // the same call again: nothing was corrected
	}
	toolName := failed.Failed.Tool
	if toolName == "" && failed.Started != nil {
		toolName = failed.Started.Tool
	}
	if toolName == "" {
		return nil, nil // not a tool step
	}
	sig := events.ErrorSignature(failed.Failed.Error.Message)
	by := r.Steps[index].ResumedBy
	if by == "" {
		by = r.Agent
	}
	source := events.FixFromPerson
	if failed.Escalated != nil || (r.Agent != "" && by == r.Agent) {
		source = events.FixFromAgent
	}
	keys := make([]string, 0, len(patch))
	for k := range patch {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fix := events.FixLearnedData{
		Tool: toolName, ErrorPattern: sig, Source: source, By: by, RunID: r.ID,
		Description: fmt.Sprintf("retry with corrected %s", strings.Join(keys, ", ")),
		RootCause:   textutil.FirstLine(failed.Failed.Error.Message, 300), ArgsPatch: patch, WhenWas: was,
		LearnedFrom: completedID,
	}
	// One fix per tool, error and failed value: a correction learned from
	// one run applies to a failure with the same failed value, and a
	// correction of another value is another fix, not a replacement.
	learned, err := events.NewEvent(events.FixLearned, events.LearnedFixID(toolName, sig, was), completedID+"/learn", Source, fix)
	if err != nil {
		return nil, err
	}
	learned.SetTime(now)
	return &learned, nil
}

func sameArgs(a, b map[string]any) bool {
	return reflect.DeepEqual(normalizeJSON(a), normalizeJSON(b))
}

// diff returns the args that changed (new values) and their old values.
func diff(before, after map[string]any) (patch, was map[string]any) {
	patch, was = map[string]any{}, map[string]any{}
	for k, nv := range after {
		ov, ok := before[k]
		if !ok || !reflect.DeepEqual(normalizeJSON(ov), normalizeJSON(nv)) {
			patch[k] = nv
			if ok {
				was[k] = ov
			}
		}
	}
	return patch, was
}
