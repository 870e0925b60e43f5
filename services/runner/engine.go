package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
)

// Source is the CloudEvents source of everything the runner publishes.
const Source = "heed/runner"

// engine drives runs. Its consumer hands each run's events to one worker
// (partitioned by run id), so a Run is only ever touched by one goroutine
// at a time; tool calls run in their own goroutines and report back by
// publishing events.
type engine struct {
	bus     *events.Bus
	invoker *tool.Invoker
	skills  *skill.Cache
	log     *slog.Logger
	ackWait time.Duration

	// Healing: how long a failed tool step waits for the healer's first
	// verdict, and for its outcome once it took the step up.
	healWait, healTimeout time.Duration
	fixes, patterns       *events.BucketCache // learned state, read from the learner's buckets
	timers                map[string]*timer

	mu       sync.Mutex
	runs     map[string]*RunState
	inflight map[string]*flight // key: run/index/attempt
	// finished keeps the runs that ended last (ids oldest first in
	// finishedIDs): the events published with the end are still to be
	// delivered, and each would otherwise rebuild the run from the log
	// only to find it over.
	finished    map[string]*RunState
	finishedIDs []string
}

// maxFinished bounds the finished runs kept.
const maxFinished = 1024

type flight struct {
	cancel context.CancelFunc
	state  string // running | done (result published) | lost (result not published: relaunch)
}

func flightKey(run string, index, attempt int) string {
	return run + "/" + strconv.Itoa(index) + "/" + strconv.Itoa(attempt)
}

func newEngine(bus *events.Bus, inv *tool.Invoker, log *slog.Logger, ackWait time.Duration) *engine {
	return &engine{bus: bus, invoker: inv, skills: skill.NewCache(), log: log, ackWait: ackWait,
		runs: map[string]*RunState{}, inflight: map[string]*flight{}, timers: map[string]*timer{}, finished: map[string]*RunState{},
		healWait: 3 * time.Second, healTimeout: 2 * time.Minute}
}

// runIDOf is the partition key: the run an event belongs to. An answer
// that does not name its run (run_id is optional for outside writers) is
// mapped by its confirmation id when the runner made it (ConfirmID).
func runIDOf(ev *events.Event) string {
	if events.Type(ev.Type()).Kind() == "run" {
		return ev.Subject()
	}
	var d struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal(ev.Data(), &d)
	if d.RunID != "" {
		return d.RunID
	}
	if run, _, _, ok := ParseConfirmID(ev.Subject()); ok {
		return run
	}
	return ev.Subject()
}

// load returns the cached run, or rebuilds it from the log. A brand-new
// run's first event needs no read: there is nothing before it.
func (e *engine) load(ctx context.Context, id string, d *events.Delivery) (*RunState, error) {
	e.mu.Lock()
	r, ok := e.runs[id]
	if !ok {
		r, ok = e.finished[id]
	}
	e.mu.Unlock()
	if ok {
		return r, nil
	}
	r = newRun(id)
	fresh := events.Type(d.Event.Type()) == events.RunRequested && d.Delivered == 1
	if !fresh {
		_, err := events.ReadLog(ctx, e.bus.JetStream(), events.EventStream, []string{events.SubjectFilter("run", id)}, 0, func(raw events.RawMsg) error {
			ev, err := e.bus.Codec().DecodeStored(raw)
			if err != nil {
				return nil
			}
			return r.Apply(ev, raw.Seq, e.skills)
		})
		if err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	e.runs[id] = r
	e.mu.Unlock()
	return r, nil
}

func (e *engine) forget(id string) {
	e.mu.Lock()
	delete(e.runs, id)
	delete(e.finished, id)
	e.mu.Unlock()
}

// done moves an ended run to the finished runs.
func (e *engine) done(r *RunState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.runs, r.ID)
	if _, ok := e.finished[r.ID]; !ok {
		e.finishedIDs = append(e.finishedIDs, r.ID)
	}
	e.finished[r.ID] = r
	if len(e.finishedIDs) > maxFinished {
		delete(e.finished, e.finishedIDs[0])
		e.finishedIDs = e.finishedIDs[1:]
	}
}

// handle is the consumer's handler.
func (e *engine) handle(ctx context.Context, d *events.Delivery) ([]events.Event, error) {
	id := runIDOf(d.Event)
	if !events.ValidID(id) {
		return nil, nil
	}
	if events.Type(d.Event.Type()).Kind() == "confirm" {
		ok, err := e.takesEffect(ctx, id, d)
		if err != nil || !ok {
			return nil, err
		}
	}
	r, err := e.load(ctx, id, d)
	if err != nil {
		return nil, err
	}
	if err := r.Apply(d.Event, d.Seq, e.skills); err != nil {
		return nil, events.Poison(err)
	}
	if !r.Requested {
		// Driven by an outside agent, or not ours: nothing to do.
		if r.Terminal() {
			e.done(r)
		}
		return nil, nil
	}
	switch events.Type(d.Event.Type()) {
	case events.HealTriggered, events.HealRetried, events.HealGaveUp, events.HealEscalated:
		var ref struct {
			Index   int `json:"index"`
			Attempt int `json:"attempt"`
		}
		if json.Unmarshal(d.Event.Data(), &ref) == nil {
			e.stopTimer(flightKey(id, ref.Index, ref.Attempt))
		}
	case events.RunCancelled:
		e.cancelFlights(id)
	case events.RunStepCompleted, events.RunStepFailed:
		var ref struct {
			Index   int `json:"index"`
			Attempt int `json:"attempt"`
		}
		if json.Unmarshal(d.Event.Data(), &ref) == nil {
			e.mu.Lock()
			delete(e.inflight, flightKey(id, ref.Index, ref.Attempt))
			e.mu.Unlock()
		}
	}
	out, act := e.reconcile(r, d.Event)
	if len(out) > 0 {
		if err := e.bus.PublishAll(ctx, out); err != nil {
			e.forget(id) // our local view ran ahead of the log; rebuild next time
			return nil, err
		}
	}
	if r.Terminal() {
		e.done(r)
		return nil, nil
	}
	switch {
	case act.launch != nil:
		e.launch(ctx, d, r.ID, act.launch)
	case act.wait != nil:
		e.startTimer(ctx, d, act.wait)
	}
	return nil, nil
}

// takesEffect judges an answer the way every reader of the log does (the
// first valid answer in log order takes effect; see lib/confirmation) and
// reports whether it is the answer of a confirmation of run id. Refused
// answers are left alone: the confirm router reports them.
func (e *engine) takesEffect(ctx context.Context, id string, d *events.Delivery) (bool, error) {
	if events.Type(d.Event.Type()) != events.ConfirmAnswered {
		return false, nil
	}
	st, err := confirmation.Load(ctx, e.bus, d.Event.Subject())
	if events.CodeOf(err) == events.CodeNotFound {
		return false, nil // an answer before its question: refused
	}
	if err != nil {
		return false, err
	}
	a, ok := st.AnswerAt(d.Seq)
	if !ok || a.Refusal != nil || st.Gate.RunID == "" {
		return false, nil
	}
	if st.Gate.RunID != id {
		// Not the runner's confirmation (its id does not name the run)
		// and the answer does not say which run: the run's own worker
		// must apply it, and this is not that worker.
		e.log.Debug("answer for a run the runner does not map", "confirm", d.Event.Subject(), "run", st.Gate.RunID)
		return false, nil
	}
	return true, nil
}

// action is what a reconcile asks for beyond publishing events.
type action struct {
	launch *launch
	wait   *wait
}

// wait publishes an event after a delay unless something else happens
// first (a heal verdict): the bounded wait for the healer.
type wait struct {
	key   string
	after time.Duration
	event events.Event
}

// launch is a tool call to make. For a retry, the step.started event of
// the new attempt is published after the backoff, just before the call.
type launch struct {
	index, attempt int
	step           *skill.Step
	args           map[string]any
	delay          time.Duration
	start          *events.Event
}

// reconcile looks at the run and emits what must happen next, applying its
// own events as it goes, until the run needs something from outside: a tool
// result, an answer, a backoff. It is level-triggered: given the same state
// it emits the same events with the same ids, so a redelivery after a crash
// republishes duplicates that JetStream drops.
func (e *engine) reconcile(r *RunState, cause *events.Event) ([]events.Event, action) {
	em := &emitter{e: e, r: r, cause: cause.ID()}
	emit := em.emit
	out := func() []events.Event { return em.out }
	for guard := 0; guard < 4*len(r.Steps)+8; guard++ {
		if r.Terminal() {
			return out(), action{}
		}
		if r.SkillErr != nil || r.Skill == nil {
			msg := "skill did not load"
			if r.SkillErr != nil {
				msg = r.SkillErr.Error()
			}
			emit(events.RunFailed, "failed", events.RunFailedData{Error: events.ErrorInfo{Message: msg, Kind: "skill"}})
			return out(), action{}
		}
		if r.Status == StatusRequested {
			names := make([]string, len(r.Skill.Steps))
			for i, s := range r.Skill.Steps {
				names[i] = s.Name
			}
			emit(events.RunStarted, "started", events.RunStartedData{Skill: r.SkillName, Driver: "runner", Inputs: r.Inputs, Steps: names, Agent: r.Agent, Yes: r.Yes, KnownIssues: e.knownIssues(r.Skill)})
			continue
		}
		i := r.current(e.healWait > 0)
		if i == len(r.Steps) {
			emit(events.RunCompleted, "completed", e.completion(r))
			return out(), action{}
		}
		st, ss := r.Skill.Steps[i], &r.Steps[i]
		switch ss.Status {
		case StepPending:
			if st.Condition != nil {
				v, err := st.Condition.Eval(r.env())
				if err != nil {
					emit(events.RunStepFailed, stepSuffix(i, 1, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: 1, Error: events.ErrorInfo{Message: "condition: " + err.Error(), Kind: "expression"}})
					continue
				}
				if b, ok := v.(bool); !ok || !b {
					emit(events.RunStepSkipped, fmt.Sprintf("s%d/skipped", i), events.StepSkippedData{Step: st.Name, Index: i, Reason: "condition is false: " + st.Condition.Src})
					continue
				}
			}
			e.startStep(r, i, 1, nil, "", emit)
		case StepStarted:
			switch st.Kind {
			case skill.KindTool:
				k := flightKey(r.ID, i, ss.Attempt)
				e.mu.Lock()
				f := e.inflight[k]
				running := f != nil && f.state != "lost" // state is written under mu by the call's goroutine
				e.mu.Unlock()
				if running {
					return out(), action{} // running (or its result is on the way)
				}
				// A call started before (not by this reconcile) and not
				// running here: its result is unknown (a crash, a restart).
				// A tool that does not honour idempotency keys is not called
				// again before a person says so.
				if !em.emitted(stepSuffix(i, ss.Attempt, "started")) && !e.idempotent(st.Tool) {
					switch {
					case ss.ConfirmID != LostCallConfirmID(r.ID, i, ss.Attempt) || ss.Answer == nil:
						if r.Status != StatusPaused {
							e.askLostCall(r, i, ss.Attempt, em)
						}
						return out(), action{}
					case ss.Answer.Choice != ChoiceRunAgain:
						a := ss.Answer
						emit(events.RunResumed, stepSuffix(i, ss.Attempt, "resumed-lost"), events.RunResumedData{Step: st.Name, Index: i, ConfirmID: ss.ConfirmID, Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason})
						emit(events.RunStepFailed, stepSuffix(i, ss.Attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: ss.Attempt, Tool: st.Tool, Args: ss.Args,
							Error: events.ErrorInfo{Kind: "lost", Message: fmt.Sprintf("the result of this call was lost when heed restarted, and %s chose not to call %s again (it does not honour idempotency keys)", a.By, st.Tool)}})
						continue
					case r.Status == StatusPaused:
						a := ss.Answer
						emit(events.RunResumed, stepSuffix(i, ss.Attempt, "resumed-lost"), events.RunResumedData{Step: st.Name, Index: i, ConfirmID: ss.ConfirmID, Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason})
					}
				}
				return out(), action{launch: &launch{index: i, attempt: ss.Attempt, step: st, args: ss.Args}}
			case skill.KindCompute:
				e.compute(r, i, ss.Attempt, emit)
			case skill.KindConfirm:
				if ss.Answer == nil {
					if r.Status != StatusPaused {
						e.askConfirm(r, i, ss.Attempt, em)
					}
					return out(), action{}
				}
				a := ss.Answer
				if a.Choice == "cancel" {
					idx := i
					emit(events.RunCancelled, "cancelled", events.RunCancelledData{By: a.By, Reason: fmt.Sprintf("%q chosen at confirmation %s (%s)", a.Choice, ss.ConfirmID, a.Method), Step: st.Name, Index: &idx})
					return out(), action{}
				}
				emit(events.RunStepCompleted, stepSuffix(i, ss.Attempt, "completed"), events.StepCompletedData{Step: st.Name, Index: i, Attempt: ss.Attempt, Output: a.Choice})
				emit(events.RunResumed, stepSuffix(i, ss.Attempt, "resumed"), events.RunResumedData{Step: st.Name, Index: i, ConfirmID: ss.ConfirmID, Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason})
			}
		case StepFailed:
			// on_error: continue is done() and never lands here, unless
			// healing is still deciding.
			if st.Kind == skill.KindTool && !ss.healDecided() && e.healWait > 0 {
				h := ss.Heal
				if h.Attempt != ss.Attempt {
					h = HealState{}
				}
				switch {
				case h.Retry != nil:
					// The heal's retry: caused by heal.retried, whatever
					// event this reconcile started from.
					em.cause = h.RetryID
					e.startStep(r, i, h.Retry.NextAttempt, h.Retry.Args, ss.FailedID, emit)
					em.cause = cause.ID()
					continue
				case h.Escalated != nil:
					if r.Status != StatusPaused {
						emit(events.RunPaused, stepSuffix(i, ss.Attempt, "paused-agent"), events.RunPausedData{Reason: events.PauseAwaitingAgent, Step: st.Name, Index: i, Message: firstLine(h.Escalated.Question, 500)})
					}
					return out(), action{}
				case h.Triggered:
					if left := e.healTimeout - time.Since(h.TriggeredAt); left > 0 {
						return out(), action{wait: e.giveUp(r, i, ss.Attempt, left, fmt.Sprintf("the healer did not finish within %s", e.healTimeout))}
					}
					emit(events.HealGaveUp, stepSuffix(i, ss.Attempt, "heal/gave_up"), events.HealGaveUpData{Step: st.Name, Index: i, Attempt: ss.Attempt, Reason: fmt.Sprintf("the healer did not finish within %s", e.healTimeout)})
					continue
				default:
					if left := e.healWait - time.Since(ss.FailedAt); left > 0 {
						return out(), action{wait: e.giveUp(r, i, ss.Attempt, left, fmt.Sprintf("no verdict from the healer within %s", e.healWait))}
					}
					emit(events.HealGaveUp, stepSuffix(i, ss.Attempt, "heal/gave_up"), events.HealGaveUpData{Step: st.Name, Index: i, Attempt: ss.Attempt, Reason: fmt.Sprintf("no verdict from the healer within %s", e.healWait)})
					continue
				}
			}
			if st.OnError == skill.OnErrorRetry && ss.Attempt < st.Retry.Attempts && st.Kind == skill.KindTool {
				next := ss.Attempt + 1
				e.mu.Lock()
				_, busy := e.inflight[flightKey(r.ID, i, next)]
				e.mu.Unlock()
				if busy {
					return out(), action{} // the retry is waiting out its backoff
				}
				ev, err := e.startEvent(r, i, next, ss.Args, ss.FailedID)
				if err != nil {
					return out(), action{}
				}
				return out(), action{launch: &launch{index: i, attempt: next, step: st, args: ss.Args, delay: st.Retry.Delay(ss.Attempt), start: ev}}
			}
			// One id per failed attempt: a retry that fails again fails the
			// run again. A failure already in the log means the run was
			// resumed for a retry whose new attempt is on its way.
			idx, suffix := i, stepSuffix(i, ss.Attempt, "run-failed")
			if !r.applied[r.ID+"/"+suffix] {
				emit(events.RunFailed, suffix, events.RunFailedData{Step: st.Name, Index: &idx, Error: *ss.Error, DurationMS: msSince(r.RequestedAt)})
			}
			return out(), action{}
		}
	}
	return out(), action{}
}

// emitter builds the runner's events with ids derived from the run and
// applies each to the run as it goes.
type emitter struct {
	e     *engine
	r     *RunState
	cause string
	out   []events.Event
}

func (m *emitter) emit(t events.Type, suffix string, data any) {
	ev, err := events.NewEvent(t, m.r.ID, m.r.ID+"/"+suffix, Source, data)
	if err != nil {
		m.e.log.Error("build event", "type", t, "err", err)
		return
	}
	ev.SetExtension("causationid", m.cause)
	_ = m.r.Apply(&ev, 0, m.e.skills)
	m.out = append(m.out, ev)
}

// emitted reports whether this reconcile emitted the event with suffix.
func (m *emitter) emitted(suffix string) bool {
	id := m.r.ID + "/" + suffix
	for i := range m.out {
		if m.out[i].ID() == id {
			return true
		}
	}
	return false
}

// other adds an event of another aggregate (a confirmation) without
// applying it to the run.
func (m *emitter) other(ev events.Event) {
	ev.SetExtension("causationid", m.cause)
	m.out = append(m.out, ev)
}

// current is the index of the first step the run has not moved past.
func (r *RunState) current(healing bool) int {
	for i, st := range r.Skill.Steps {
		if !r.Steps[i].done(st, healing) {
			return i
		}
	}
	return len(r.Steps)
}

func stepSuffix(i, attempt int, what string) string {
	return fmt.Sprintf("s%d/a%d/%s", i, attempt, what)
}

// startStep emits step.started for attempt, plus what a compute or confirm
// step does at once.
func (e *engine) startStep(r *RunState, i, attempt int, args map[string]any, retryOf string, emit func(events.Type, string, any)) {
	st := r.Skill.Steps[i]
	data := events.StepStartedData{Step: st.Name, Index: i, Attempt: attempt, Kind: string(st.Kind), RetryOf: retryOf}
	if st.Kind == skill.KindTool {
		data.Tool = st.Tool
		data.IdempotencyKey = tool.IdempotencyKey(r.ID, i, attempt)
		if args == nil && st.Args != nil {
			v, err := st.Args.Render(r.env())
			if err != nil {
				emit(events.RunStepStarted, stepSuffix(i, attempt, "started"), data)
				emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Tool: st.Tool, Error: events.ErrorInfo{Message: "args: " + err.Error(), Kind: "template"}})
				return
			}
			args, _ = v.(map[string]any)
		}
		if args == nil {
			args = map[string]any{}
		}
		data.Args, data.ArgsTruncated = truncateMap(args, maxFieldBytes)
		if data.ArgsTruncated {
			e.log.Warn("tool args too large for the log; the event holds a preview", "run", r.ID, "step", st.Name)
		}
		for _, w := range e.warnings(st.Tool, args) {
			emit(events.RunWarning, stepSuffix(i, attempt, "warning/"+w.PatternID), events.RunWarningData{Step: st.Name, Index: i, Tool: st.Tool, PatternID: w.PatternID, Message: w.Message, Confidence: w.Confidence})
		}
	}
	emit(events.RunStepStarted, stepSuffix(i, attempt, "started"), data)
}

func (e *engine) startEvent(r *RunState, i, attempt int, args map[string]any, retryOf string) (*events.Event, error) {
	st := r.Skill.Steps[i]
	data := events.StepStartedData{Step: st.Name, Index: i, Attempt: attempt, Kind: string(st.Kind), Tool: st.Tool, Args: args,
		IdempotencyKey: tool.IdempotencyKey(r.ID, i, attempt), RetryOf: retryOf}
	ev, err := events.NewEvent(events.RunStepStarted, r.ID, r.ID+"/"+stepSuffix(i, attempt, "started"), Source, data)
	return &ev, err
}

func (e *engine) compute(r *RunState, i, attempt int, emit func(events.Type, string, any)) {
	st := r.Skill.Steps[i]
	start := time.Now()
	v, err := st.Compute.Eval(r.env())
	if err != nil {
		emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Error: events.ErrorInfo{Message: err.Error(), Kind: "expression"}})
		return
	}
	out, trunc := truncateValue(jsonable(v), maxFieldBytes)
	emit(events.RunStepCompleted, stepSuffix(i, attempt, "completed"), events.StepCompletedData{Step: st.Name, Index: i, Attempt: attempt, Output: out, OutputTruncated: trunc, DurationMS: msSince(start)})
}

// ConfirmID is the id of the confirmation a confirm step asks for.
func ConfirmID(runID string, index, attempt int) string {
	return fmt.Sprintf("%s-s%d-a%d", runID, index, attempt)
}

// LostCallConfirmID is the id of the confirmation that asks whether a
// call of a tool that does not honour idempotency keys may be made again.
func LostCallConfirmID(runID string, index, attempt int) string {
	return fmt.Sprintf("%s-l%d-a%d", runID, index, attempt)
}

// ChoiceRunAgain is the lost-call confirmation's option to call the tool
// again.
const ChoiceRunAgain = "run_again"

// ParseConfirmID splits a ConfirmID (or a LostCallConfirmID) into its run,
// step index and attempt.
func ParseConfirmID(id string) (runID string, index, attempt int, ok bool) {
	i := strings.LastIndex(id, "-a")
	if i < 0 {
		return "", 0, 0, false
	}
	attempt, err := strconv.Atoi(id[i+2:])
	if err != nil || attempt < 1 {
		return "", 0, 0, false
	}
	j := max(strings.LastIndex(id[:i], "-s"), strings.LastIndex(id[:i], "-l"))
	if j <= 0 {
		return "", 0, 0, false
	}
	index, err = strconv.Atoi(id[j+2 : i])
	if err != nil || index < 0 {
		return "", 0, 0, false
	}
	return id[:j], index, attempt, true
}

// idempotent reports whether a tool may be called again with the same key.
func (e *engine) idempotent(name string) bool {
	spec, ok := e.invoker.Registry.Get(name)
	return !ok || spec.IsIdempotent()
}

// askLostCall pauses the run and asks a person whether a call whose result
// was lost may be made again: the tool does not honour idempotency keys,
// so it may already have done its work.
func (e *engine) askLostCall(r *RunState, i, attempt int, em *emitter) {
	st, ss := r.Skill.Steps[i], r.Steps[i]
	cid := LostCallConfirmID(r.ID, i, attempt)
	idx := i
	msg := fmt.Sprintf("heed restarted while %s (step %s, attempt %d) ran, and its result was lost. %s does not honour idempotency keys: it may already have done its work. Call it again?", st.Tool, st.Name, attempt, st.Tool)
	args, _ := truncateMap(ss.Args, 4*1024)
	req := events.ConfirmRequestedData{
		Title: "A call's result was lost", Message: msg, Default: "fail",
		Options: []events.Option{
			{Label: "Call it again", Value: ChoiceRunAgain, Description: "it may do its work twice"},
			{Label: "Fail the step", Value: "fail", Description: "the step's on_error applies"},
		},
		Requester: Source, Agent: r.Agent, RunID: r.ID, Skill: r.SkillName, Step: st.Name, Index: &idx,
		Context: map[string]any{"tool": st.Tool, "args": args, "idempotency_key": tool.IdempotencyKey(r.ID, i, attempt)},
	}
	ev, err := events.NewEvent(events.ConfirmRequested, cid, cid+"/requested", Source, req)
	if err != nil {
		e.log.Error("build confirmation", "run", r.ID, "err", err)
		return
	}
	em.other(ev)
	em.emit(events.RunPaused, stepSuffix(i, attempt, "paused-lost"), events.RunPausedData{Reason: events.PauseAwaitingConfirmation, Step: st.Name, Index: i, ConfirmID: cid, Message: firstLine(msg, 500)})
}

func (e *engine) askConfirm(r *RunState, i, attempt int, em *emitter) {
	st := r.Skill.Steps[i]
	c := st.Confirm
	env := r.env()
	msg, err := c.Message.RenderString(env)
	if err != nil {
		em.emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Error: events.ErrorInfo{Message: "message: " + err.Error(), Kind: "template"}})
		return
	}
	title := ""
	if c.Title != nil {
		title, _ = c.Title.RenderString(env)
	}
	opts := make([]events.Option, len(c.Options))
	for k, o := range c.Options {
		opts[k] = events.Option{Label: o.Label, Value: o.Value, Description: o.Description}
	}
	cid := ConfirmID(r.ID, i, attempt)
	idx := i
	req := events.ConfirmRequestedData{
		Title: title, Message: msg, Options: opts, Default: c.Default, TimeoutS: c.Timeout.Seconds(),
		AIAssist: c.AIAssist, LearnPreference: c.LearnPreference, Yes: r.Yes, Requester: Source, Agent: r.Agent,
		RunID: r.ID, Skill: r.SkillName, Step: st.Name, Index: &idx,
		Context: confirmContext(r, i),
	}
	ev, err := events.NewEvent(events.ConfirmRequested, cid, cid+"/requested", Source, req)
	if err != nil {
		e.log.Error("build confirmation", "run", r.ID, "err", err)
		return
	}
	em.other(ev)
	em.emit(events.RunPaused, stepSuffix(i, attempt, "paused"), events.RunPausedData{Reason: events.PauseAwaitingConfirmation, Step: st.Name, Index: i, ConfirmID: cid, Message: firstLine(msg, 500)})
}

// launch runs a tool call in its own goroutine. The delivery that caused it
// stays unacknowledged until the result is in the log, so a crash at any
// point redelivers it and the call is made again with the same
// idempotency key.
func (e *engine) launch(ctx context.Context, d *events.Delivery, runID string, l *launch) {
	k := flightKey(runID, l.index, l.attempt)
	fctx, cancel := context.WithCancel(ctx)
	f := &flight{cancel: cancel, state: "running"}
	e.mu.Lock()
	e.inflight[k] = f
	e.mu.Unlock()
	finish := d.Hold()
	call := tool.Call{Tool: l.step.Tool, Args: l.args, RunID: runID, Step: l.step.Name, Attempt: l.attempt, IdempotencyKey: tool.IdempotencyKey(runID, l.index, l.attempt)}
	go func() {
		defer cancel()
		heartbeat := time.NewTicker(max(e.ackWait/3, 100*time.Millisecond))
		defer heartbeat.Stop()
		settle := func(state string, err error) {
			e.mu.Lock()
			f.state = state
			e.mu.Unlock()
			finish(nil, err)
		}
		if l.delay > 0 {
			t := time.NewTimer(l.delay)
		wait:
			for {
				select {
				case <-t.C:
					break wait
				case <-heartbeat.C:
					_ = d.InProgress()
				case <-fctx.Done():
					t.Stop()
					settle("lost", fctx.Err())
					return
				}
			}
		}
		if l.start != nil {
			if err := e.bus.PublishAll(ctx, []events.Event{*l.start}); err != nil {
				settle("lost", err)
				return
			}
		}
		results := make(chan tool.Result, 1)
		go func() { results <- e.invoker.Invoke(fctx, call) }()
		var res tool.Result
	run:
		for {
			select {
			case res = <-results:
				break run
			case <-heartbeat.C:
				_ = d.InProgress()
			}
		}
		ev := e.resultEvent(runID, l, res)
		if err := e.bus.PublishAll(ctx, []events.Event{ev}); err != nil {
			e.log.Warn("tool result not stored; the call will be made again", "run", runID, "step", l.step.Name, "err", err)
			settle("lost", err)
			return
		}
		settle("done", nil)
	}()
}

func (e *engine) resultEvent(runID string, l *launch, res tool.Result) events.Event {
	var ev events.Event
	var err error
	if res.Err == nil {
		out, trunc := truncateValue(res.Output, maxFieldBytes)
		ev, err = events.NewEvent(events.RunStepCompleted, runID, runID+"/"+stepSuffix(l.index, l.attempt, "completed"), Source,
			events.StepCompletedData{Step: l.step.Name, Index: l.index, Attempt: l.attempt, Output: out, OutputTruncated: trunc, DurationMS: ms(res.Duration)})
	} else {
		msg, trunc := truncateString(res.Err.Message, maxFieldBytes)
		args, argsTrunc := truncateMap(l.args, maxFieldBytes)
		out, _ := truncateValue(res.Output, maxFieldBytes/4)
		ev, err = events.NewEvent(events.RunStepFailed, runID, runID+"/"+stepSuffix(l.index, l.attempt, "failed"), Source,
			events.StepFailedData{Step: l.step.Name, Index: l.index, Attempt: l.attempt, Tool: l.step.Tool, Args: args, ArgsTruncated: argsTrunc,
				Error: events.ErrorInfo{Message: msg, Kind: res.Err.Kind, ExitCode: res.Err.ExitCode, Truncated: trunc}, Output: out, DurationMS: ms(res.Duration)})
	}
	if err != nil {
		e.log.Error("build result event", "err", err)
	}
	return ev
}

// cancelFlights stops the tool calls of a cancelled run.
func (e *engine) cancelFlights(runID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	prefix := runID + "/"
	for k, f := range e.inflight {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			f.cancel()
		}
	}
}

func (e *engine) completion(r *RunState) events.RunCompletedData {
	d := events.RunCompletedData{DurationMS: msSince(r.RequestedAt)}
	if r.Skill.Summary != nil {
		s, err := r.Skill.Summary.RenderString(r.env())
		if err != nil {
			s = "(summary failed: " + err.Error() + ")"
		}
		d.Summary, _ = truncateString(s, maxFieldBytes)
	}
	outs, trunc := truncateMap(r.outputs(), 4*maxFieldBytes)
	if len(outs) > 0 {
		d.Outputs, d.OutputsTruncated = outs, trunc
	}
	return d
}

// confirmContext is what an agent or person needs to decide: the recent
// steps and the values bound so far.
func confirmContext(r *RunState, i int) map[string]any {
	var recent []map[string]any
	for k := max(0, i-5); k < i; k++ {
		s := r.Steps[k]
		entry := map[string]any{"step": r.Skill.Steps[k].Name, "status": s.Status}
		if s.Error != nil {
			entry["error"] = s.Error.Message
		}
		if s.Output != nil {
			entry["output"], _ = truncateValue(s.Output, 1024)
		}
		recent = append(recent, entry)
	}
	vars, _ := truncateMap(r.outputs(), 8*1024)
	inputs, _ := truncateMap(r.Inputs, 4*1024)
	return map[string]any{"recent_steps": recent, "variables": vars, "inputs": inputs}
}

// giveUp builds the wait that ends healing for one attempt.
func (e *engine) giveUp(r *RunState, i, attempt int, after time.Duration, reason string) *wait {
	st := r.Skill.Steps[i]
	ev, err := events.NewEvent(events.HealGaveUp, r.ID, r.ID+"/"+stepSuffix(i, attempt, "heal/gave_up"), Source,
		events.HealGaveUpData{Step: st.Name, Index: i, Attempt: attempt, Reason: reason})
	if err != nil {
		e.log.Error("build event", "err", err)
	}
	return &wait{key: flightKey(r.ID, i, attempt), after: after, event: ev}
}

type timer struct {
	t      *time.Timer
	finish func([]events.Event, error)
	once   sync.Once
}

// startTimer holds the delivery and publishes the wait's event when the
// time is up, unless stopTimer comes first. After a crash the held
// delivery comes back and the wait is recomputed from the log's times.
func (e *engine) startTimer(ctx context.Context, d *events.Delivery, w *wait) {
	e.mu.Lock()
	if _, ok := e.timers[w.key]; ok {
		e.mu.Unlock()
		return
	}
	tm := &timer{finish: d.Hold()}
	e.timers[w.key] = tm
	e.mu.Unlock()
	tm.t = time.AfterFunc(w.after, func() {
		e.mu.Lock()
		delete(e.timers, w.key)
		e.mu.Unlock()
		w.event.SetTime(time.Now().UTC()) // it happens now, not when the wait was decided
		tm.once.Do(func() { tm.finish([]events.Event{w.event}, nil) })
	})
}

func (e *engine) stopTimer(key string) {
	e.mu.Lock()
	tm, ok := e.timers[key]
	delete(e.timers, key)
	e.mu.Unlock()
	if ok {
		tm.t.Stop()
		tm.once.Do(func() { tm.finish(nil, nil) })
	}
}

// knownIssues are the learned fixes for the skill's tools, published with
// the run so the agent and the person see what to watch for.
func (e *engine) knownIssues(sk *skill.Skill) []events.KnownIssue {
	if e.fixes == nil {
		return nil
	}
	tools := map[string]bool{}
	for _, st := range sk.Steps {
		if st.Kind == skill.KindTool {
			tools[st.Tool] = true
		}
	}
	var out []events.KnownIssue
	e.fixes.Each(func(_ string, v json.RawMessage) bool {
		var f readmodel.Fix
		if json.Unmarshal(v, &f) == nil && tools[f.Tool] && f.Usable() {
			out = append(out, events.KnownIssue{Tool: f.Tool, Pattern: f.ErrorPattern, Description: f.Description, FixID: f.ID, Confidence: f.Confidence})
		}
		return len(out) < 20
	})
	sort.Slice(out, func(i, j int) bool { return out[i].FixID < out[j].FixID })
	return out
}

// warnings are the active usage patterns a tool call matches.
func (e *engine) warnings(toolName string, args map[string]any) []events.RunWarningData {
	if e.patterns == nil {
		return nil
	}
	var out []events.RunWarningData
	now := time.Now()
	e.patterns.Each(func(_ string, v json.RawMessage) bool {
		var p readmodel.Pattern
		if json.Unmarshal(v, &p) != nil || p.Tool != toolName || p.Kind != "usage" || !p.Active(now, 0) || !p.Matches(args) {
			return true
		}
		out = append(out, events.RunWarningData{PatternID: p.ID, Message: p.Hint, Confidence: p.Confidence})
		return len(out) < 3
	})
	sort.Slice(out, func(i, j int) bool { return out[i].PatternID < out[j].PatternID })
	return out
}
