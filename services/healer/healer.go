// Package healer is the healer service: it recognises tool failures,
// applies a fix (a learned one first, else a generic one), asks the runner
// to retry, hands unknown errors to the run's agent, and learns the agent's
// fix so the same failure heals itself next time. Every stage is an event in
// the run's log; the runner waits (bounded) for the healer's verdict before
// a step's on_error applies.
package healer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
)

// Source is the CloudEvents source of the healer's events.
const Source = "heed/healer"

// ConsumerName is the healer's durable consumer.
const ConsumerName = "healer"

// Options configure the healer service.
type Options struct {
	ConfigFile string // patterns; "" uses DefaultConfigYAML
	ToolsFile  string // the same tools file as the runner: fix tools run through it
	Workers    int
}

type healer struct {
	cfg     *Config
	bus     *events.Bus
	invoker *tool.Invoker
	fixes   *events.BucketCache
	log     *slog.Logger
}

// Run runs the healer until ctx is done.
func Run(ctx context.Context, rt *service.Runtime, o Options) error {
	cfg, err := LoadConfig(o.ConfigFile)
	if err != nil {
		return err
	}
	reg := &tool.Registry{}
	if o.ToolsFile != "" {
		if reg, err = tool.LoadFile(o.ToolsFile); err != nil {
			return err
		}
	}
	for _, b := range readmodel.Specs(readmodel.FixesBucket) {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	fixes, err := events.WatchBucket(ctx, rt.Bus.JetStream(), readmodel.FixesBucket)
	if err != nil {
		return err
	}
	defer fixes.Stop()
	// Failures waiting in the log are handled at once: the learned fixes must
	// be loaded first, or a fix known for them is passed over.
	select {
	case <-fixes.Ready():
	case <-ctx.Done():
		return nil
	}
	h := &healer{cfg: cfg, bus: rt.Bus, invoker: &tool.Invoker{Registry: reg, Requester: rt.Conn}, fixes: fixes, log: rt.Log}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	cons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        ConsumerName,
		Description: "healer: classifies tool failures, applies fixes, learns agents' fixes",
		Filters:     []string{"heed.run.*.step.failed", "heed.run.*.step.completed"},
		AckWait:     30 * time.Second,
		Workers:     o.Workers,
		Logger:      rt.Log,
	}, h.handle)
	if err != nil {
		return err
	}
	rt.AddCheck("healer", func() any { return cons.Stats() })
	<-ctx.Done()
	dctx, cancel := service.DrainContext()
	defer cancel()
	cons.Stop(dctx)
	return nil
}

func (h *healer) handle(ctx context.Context, d *events.Delivery) ([]events.Event, error) {
	switch events.Type(d.Event.Type()) {
	case events.RunStepFailed:
		var f events.StepFailedData
		if err := json.Unmarshal(d.Event.Data(), &f); err != nil {
			return nil, events.Poison(err)
		}
		if f.Tool == "" {
			return nil, nil // compute and confirm steps are not tool failures
		}
		return nil, h.heal(ctx, d, &f)
	case events.RunStepCompleted:
		var c events.StepCompletedData
		if err := json.Unmarshal(d.Event.Data(), &c); err != nil {
			return nil, events.Poison(err)
		}
		if c.Attempt < 2 {
			return nil, nil
		}
		return h.learn(ctx, d, &c)
	}
	return nil, nil
}

// stage builds one heal event of a failed attempt, with a deterministic id.
func stage(run string, index, attempt int, t events.Type, data any) (events.Event, error) {
	verb := strings.TrimPrefix(string(t), "heed.run.heal.")
	return events.NewEvent(t, run, fmt.Sprintf("%s/s%d/a%d/heal/%s", run, index, attempt, verb), Source, data)
}

// heal works on one failed attempt: it picks up where a crashed healer left
// off, because every stage is in the log.
func (h *healer) heal(ctx context.Context, d *events.Delivery, f *events.StepFailedData) error {
	runID := d.Event.Subject()
	v, err := loadRun(ctx, h.bus, runID)
	if err != nil {
		return err
	}
	a := v.at(f.Index, f.Attempt)
	if v.terminal || a.decided() {
		return nil
	}
	if later := v.steps[f.Index][f.Attempt+1]; later != nil && later.started != nil && a.triggered == nil {
		// Already retried (an agent driving its own run corrected it before
		// the healer got to it): there is nothing left to heal.
		return nil
	}
	publish := func(t events.Type, data any) error {
		ev, err := stage(runID, f.Index, f.Attempt, t, data)
		if err != nil {
			return err
		}
		_, err = h.bus.Publish(ctx, &ev)
		return err
	}
	giveUp := func(reason, fixID string) error {
		return publish(events.HealGaveUp, events.HealGaveUpData{Step: f.Step, Index: f.Index, Attempt: f.Attempt, Reason: reason, FixID: fixID})
	}
	// The previous attempt was a heal with a fix that did not work.
	if prev, ok := v.retryFix(f.Index, f.Attempt); ok && prev.retried.FixID != "" && a.triggered == nil {
		return giveUp(fmt.Sprintf("the learned fix %s did not heal it", prev.retried.FixID), prev.retried.FixID)
	}
	if n := v.heals(f.Index); n >= h.cfg.MaxHeals && a.triggered == nil {
		return giveUp(fmt.Sprintf("healed %d times and still failing", n), "")
	}

	tr := a.triggered
	if tr == nil {
		tr = h.plan(v, f)
		tr.HealAttempt = v.heals(f.Index) + 1
		if err := publish(events.HealTriggered, tr); err != nil {
			return err
		}
	}
	switch tr.Plan {
	case events.PlanGiveUp:
		return giveUp("no fix is known for this error and the run has no agent to ask", "")
	case events.PlanAgent:
		return publish(events.HealEscalated, events.HealEscalatedData{
			Step: f.Step, Index: f.Index, Attempt: f.Attempt, Agent: v.agent,
			Context: map[string]any{
				"skill": v.skill, "step": f.Step, "tool": f.Tool, "args": f.Args, "error": f.Error.Message,
				"classification": tr.Classification.Kind, "recent_steps": v.recent,
			},
			Question: fmt.Sprintf("%s failed with %q. Retry with corrected args (heed retry %s --arg key=value) or let on_error apply (heed continue %s).", f.Tool, firstLine(f.Error.Message), runID, runID),
		})
	}
	// A fix: run its tool (if any), then ask for the next attempt.
	fix := tr.Fix
	if fix.Tool != "" && !a.fixApplied {
		stop := heartbeat(d)
		res := h.invoker.Invoke(ctx, tool.Call{Tool: fix.Tool, Args: fix.Args, RunID: runID, Step: f.Step, Attempt: f.Attempt,
			IdempotencyKey: fmt.Sprintf("%s/heal/%d/%d", runID, f.Index, f.Attempt)})
		stop()
		applied := events.HealFixAppliedData{Step: f.Step, Index: f.Index, Attempt: f.Attempt, Fix: *fix, OK: res.Err == nil, DurationMS: float64(res.Duration.Microseconds()) / 1000}
		if res.Err != nil {
			applied.Error = &events.ErrorInfo{Message: res.Err.Message, Kind: res.Err.Kind, ExitCode: res.Err.ExitCode}
		} else if out, err := json.Marshal(res.Output); err == nil && len(out) < 4096 {
			applied.Output = res.Output
		}
		if err := publish(events.HealFixApplied, applied); err != nil {
			return err
		}
		if res.Err != nil {
			return giveUp(fmt.Sprintf("the fix %s failed: %s", fix.Tool, res.Err.Message), fix.FixID)
		}
	}
	args, err := h.correctedArgs(f, fix)
	if err != nil {
		return giveUp("the fix's corrected args did not render: "+err.Error(), fix.FixID)
	}
	return publish(events.HealRetried, events.HealRetriedData{Step: f.Step, Index: f.Index, Attempt: f.Attempt, NextAttempt: f.Attempt + 1,
		Args: args, FixID: fix.FixID, Reason: fix.Description})
}

// plan classifies the failure and chooses: a learned fix beats a generic
// pattern; an unknown error goes to the run's agent.
func (h *healer) plan(v *runView, f *events.StepFailedData) *events.HealTriggeredData {
	sig := events.ErrorSignature(f.Error.Message)
	tr := &events.HealTriggeredData{Step: f.Step, Index: f.Index, Attempt: f.Attempt, Tool: f.Tool, Error: f.Error,
		Classification: events.Classification{Kind: "unknown", Signature: sig}}
	p := h.cfg.Classify(f.Error.Message)
	if p != nil {
		tr.Classification.Kind, tr.Classification.Pattern = p.Kind, strings.Join(p.Match, "|")
	}
	if fx, ok := h.learnedFix(f, sig); ok {
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
		if _, ok := h.invoker.Registry.Get(p.Fix.Tool); ok {
			spec, _ := h.invoker.Registry.Get(f.Tool)
			toolCluster := ""
			if spec != nil {
				toolCluster = spec.Cluster
			}
			env := map[string]any{"args": f.Args, "error": f.Error.Message, "tool": f.Tool,
				"cluster": h.cfg.Cluster(f.Tool, toolCluster, f.Error.Message+" "+fmt.Sprint(f.Output))}
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
	if v.agent != "" {
		tr.Plan = events.PlanAgent
		return tr
	}
	tr.Plan = events.PlanGiveUp
	return tr
}

// learnedFix finds a usable learned fix for the failure: one for this exact
// signature first, then one whose match text the error contains.
func (h *healer) learnedFix(f *events.StepFailedData, sig string) (readmodel.Fix, bool) {
	var best readmodel.Fix
	found := false
	msg := strings.ToLower(f.Error.Message)
	var candidates []readmodel.Fix
	h.fixes.Each(func(_ string, v json.RawMessage) bool {
		var fx readmodel.Fix
		if json.Unmarshal(v, &fx) != nil || fx.Tool != f.Tool || !fx.Usable() {
			return true
		}
		if fx.ErrorPattern == sig || (fx.Match != "" && strings.Contains(msg, strings.ToLower(fx.Match))) {
			candidates = append(candidates, fx)
		}
		return true
	})
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
			best, found = fx, true
			break
		}
	}
	return best, found
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
func (h *healer) correctedArgs(f *events.StepFailedData, fix *events.FixRef) (map[string]any, error) {
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
		t, err := skill.CompileTemplate(s, skill.Pos{File: "fix " + fix.FixID}, map[string]any{"args": nil, "error": nil, "tool": nil, "cluster": nil})
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

// learn records what a successful later attempt teaches: a heal that
// worked, or an agent's (or person's) corrected retry, which becomes a
// learned fix for that tool and error.
func (h *healer) learn(ctx context.Context, d *events.Delivery, c *events.StepCompletedData) ([]events.Event, error) {
	runID := d.Event.Subject()
	v, err := loadRun(ctx, h.bus, runID)
	if err != nil {
		return nil, err
	}
	cur := v.steps[c.Index][c.Attempt]
	prev := v.steps[c.Index][c.Attempt-1]
	if cur == nil || cur.started == nil || prev == nil || prev.failed == nil || cur.healed {
		return nil, nil
	}
	sig := events.ErrorSignature(prev.failed.Error.Message)
	healed := func(via, fixID string) (events.Event, error) {
		return stage(runID, c.Index, c.Attempt, events.HealHealed, events.HealHealedData{Step: c.Step, Index: c.Index, Attempt: c.Attempt, Via: via, FixID: fixID, Tool: prev.failed.Tool, Signature: sig})
	}
	if prev.retried != nil && sameArgs(cur.started.Args, prev.retried.Args) {
		// The attempt the healer asked for.
		via := events.PlanPatternFix
		if prev.triggered != nil && prev.triggered.Plan == events.PlanLearnedFix {
			via = events.PlanLearnedFix
		}
		ev, err := healed(via, prev.retried.FixID)
		if err != nil {
			return nil, err
		}
		return []events.Event{ev}, nil
	}
	// Any other attempt after a failure is a retry of it: by the runner's
	// on_error (the same args: nothing to learn) or a correction by an
	// agent or a person (heed.cmd.run.retry, or an outside agent's own
	// step.started with retry_of), which teaches a fix.
	if r := cur.started.RetryOf; r != "" && r != prev.failedID && r != "retry" {
		return nil, nil // names another attempt: not a correction of this failure
	}
	failedArgs := prev.failed.Args
	if failedArgs == nil && prev.started != nil {
		failedArgs = prev.started.Args // an outside agent's failure may not repeat them
	}
	patch, was := diff(failedArgs, cur.started.Args)
	if len(patch) == 0 {
		return nil, nil // the same call again: nothing was corrected
	}
	toolName := prev.failed.Tool
	if toolName == "" && prev.started != nil {
		toolName = prev.started.Tool
	}
	if toolName == "" {
		return nil, nil // not a tool step
	}
	by := v.resumedBy[c.Index]
	if by == "" {
		by = v.agent
	}
	source := events.FixFromPerson
	if prev.escalated || (v.agent != "" && by == v.agent) {
		source = events.FixFromAgent
	}
	keys := make([]string, 0, len(patch))
	for k := range patch {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fix := events.FixLearnedData{
		Tool: toolName, ErrorPattern: sig, Source: source, By: by, RunID: runID,
		Description: fmt.Sprintf("retry with corrected %s", strings.Join(keys, ", ")),
		RootCause:   firstLine(prev.failed.Error.Message), ArgsPatch: patch, WhenWas: was,
		LearnedFrom: d.Event.ID(),
	}
	// One fix per tool, error and failed value: a correction learned from
	// one run applies to a failure with the same failed value, and a
	// correction of another value is another fix, not a replacement.
	ev, err := events.NewEvent(events.FixLearned, events.LearnedFixID(toolName, sig, was), d.Event.ID()+"/learn", Source, fix)
	if err != nil {
		return nil, err
	}
	learned := ev
	ev, err = healed(events.PlanAgent, "")
	if err != nil {
		return nil, err
	}
	return []events.Event{learned, ev}, nil
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

func heartbeat(d *events.Delivery) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = d.InProgress()
			}
		}
	}()
	return func() { close(stop) }
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(l) > 300 {
		l = l[:300] + "…"
	}
	return l
}
