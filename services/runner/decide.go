package runner

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
)

// The runner's decisions: what a run does next is a function of the run's
// state (lib/runstate), the event that woke it, the clock, the calls running
// in this process and the learned state. Nothing here performs an effect;
// the engine publishes the events, makes the calls and keeps the timers a
// Decision asks for. Golden histories (testdata/*.jsonl) replay this code
// without a server.

// Decision is what the runner does after one event: events to publish (in
// order) and at most one effect.
type Decision struct {
	Events []events.Event
	Launch *Launch
	Wait   *Wait
}

// Wait publishes Event after a delay unless something else happens first
// (a heal verdict): the bounded wait for the healer. Key names the attempt.
type Wait struct {
	Key   string
	After time.Duration
	Event events.Event
}

// Launch is a tool call to make. For a retry, Start (the new attempt's
// step.started) is published after the backoff Delay, just before the call.
type Launch struct {
	Index, Attempt int
	Step           *skill.Step
	Args           map[string]any
	Delay          time.Duration
	Start          *events.Event
}

// CallState is what this process knows of one attempt's tool call.
type CallState int

const (
	CallNone    CallState = iota // not made here (or gone with a crash)
	CallRunning                  // running, or waiting out its backoff
	CallDone                     // its result is published, on its way back
	CallLost                     // its result was not published: make it again
)

// Facts are what a decision may know beyond the run. Every field is read,
// never changed; the clock is injected so a decision replays identically.
type Facts struct {
	Now   func() time.Time
	Calls func(index, attempt int) CallState
	// Unbacked says whether step index's answer, taken from a resumed
	// event in the run's log (Step.AnswerFromRun), has no such answer
	// behind it in the confirmation's log (nil: every answer is backed).
	Unbacked func(index int) bool
}

// Learned is the learned state the runner consults: known issues to
// publish with a run, and usage warnings for a call. Both must answer in a
// deterministic order.
type Learned interface {
	KnownIssues(tools []string) []events.KnownIssue
	Warnings(tool string, args map[string]any, now time.Time) []events.RunWarningData
}

// decider holds what decisions depend on that does not change while the
// runner runs: healing's bounds, the tools' registry, the learned state.
type decider struct {
	// How long a failed tool step waits for the healer's first verdict,
	// and for its outcome once it took the step up. 0 healWait: no
	// healing.
	healWait, healTimeout time.Duration
	tools                 *tool.Registry
	learned               Learned
	log                   *slog.Logger
	// changeSetExpiry is how long a run's queued items wait for review.
	changeSetExpiry time.Duration
}

// refuseResume answers a resume with no answer behind it (Facts.Unbacked)
// with a pause at the same confirmation, which still waits: the run's log
// says why, and the resume's answer no longer counts (runstate folds the
// pause). Its id names the event that woke the decision, so a second
// such resume is refused again.
func (d *decider) refuseResume(r *runstate.Run, i int, em *emitter) {
	st, ss := r.Skill.Steps[i], &r.Steps[i]
	a := ss.Answer
	cid := ss.ConfirmID
	if cid == "" {
		cid = ConfirmID(r.ID, i, max(ss.Attempt, 1))
	}
	// The cause's id is whoever wrote it: hashed, so the pause's id stays
	// short whatever it was.
	sum := sha256.Sum256([]byte(em.cause))
	em.emit(events.RunPaused, fmt.Sprintf("s%d/a%d/unbacked/%x", i, ss.Attempt, sum[:8]), events.RunPausedData{
		Reason: events.PauseAwaitingConfirmation, Step: st.Name, Index: i, ConfirmID: cid,
		Message: firstLine(fmt.Sprintf("still waiting at %s: the run's log said %s chose %q, but the confirmation has no such answer (a run the runner drives goes on at a confirmation's answer only)", cid, who(a.By), a.Choice), 500),
	})
}

func who(by string) string {
	if strings.TrimSpace(by) == "" {
		return "someone"
	}
	return by
}

// decide looks at the run and emits what must happen next, applying its
// own events as it goes, until the run needs something from outside: a
// tool result, an answer, a backoff. It is level-triggered: given the same
// state it emits the same events with the same ids, so a redelivery after
// a crash republishes duplicates that JetStream drops.
func (d *decider) decide(r *runstate.Run, cause *events.Event, f Facts) Decision {
	em := &emitter{d: d, r: r, cause: cause.ID(), now: f.Now()}
	emit := em.emit
	done := func() Decision { return Decision{Events: em.out} }
	for guard := 0; guard < 4*len(r.Steps)+8; guard++ {
		if r.Terminal() {
			return done()
		}
		if r.SkillErr != nil || r.Skill == nil {
			msg := "skill did not load"
			if r.SkillErr != nil {
				msg = r.SkillErr.Error()
			}
			emit(events.RunFailed, "failed", events.RunFailedData{Error: events.ErrorInfo{Message: msg, Kind: "skill"}})
			return done()
		}
		if r.Status == runstate.StatusRequested {
			names := make([]string, len(r.Skill.Steps))
			for i, s := range r.Skill.Steps {
				names[i] = s.Name
			}
			emit(events.RunStarted, "started", events.RunStartedData{Skill: r.SkillName, Driver: "runner", Inputs: r.Inputs, Steps: names, Agent: r.Agent, Yes: r.Yes, KnownIssues: d.knownIssues(r.Skill)})
			continue
		}
		if f.Unbacked != nil {
			// A resume or a confirm step's completion with no answer behind
			// it is refused before anything else is decided.
			for j := range r.Steps {
				if r.Steps[j].AnswerFromRun && f.Unbacked(j) {
					d.refuseResume(r, j, em)
					return done()
				}
			}
		}
		i := r.Next(d.healWait > 0)
		if i == len(r.Steps) {
			d.propose(r, em)
			emit(events.RunCompleted, "completed", d.completion(r, em.now))
			return done()
		}
		st, ss := r.Skill.Steps[i], &r.Steps[i]
		switch ss.Status {
		case runstate.StepPending:
			if st.Condition != nil {
				v, err := st.Condition.Eval(r.Env())
				if err != nil {
					emit(events.RunStepFailed, stepSuffix(i, 1, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: 1, Error: events.ErrorInfo{Message: "condition: " + err.Error(), Kind: "expression"}})
					continue
				}
				if b, ok := v.(bool); !ok || !b {
					emit(events.RunStepSkipped, fmt.Sprintf("s%d/skipped", i), events.StepSkippedData{Step: st.Name, Index: i, Reason: "condition is false: " + st.Condition.Src})
					continue
				}
			}
			d.startStep(r, i, 1, nil, "", em)
		case runstate.StepStarted:
			switch st.Kind {
			case skill.KindTool:
				if d.deferred(r, i) {
					// Started, not queued yet (a crash between the two):
					// a deferred tool is never called.
					d.queue(r, i, ss.Attempt, ss.Args, em)
					continue
				}
				if c := f.Calls(i, ss.Attempt); c == CallRunning || c == CallDone {
					return done() // running (or its result is on the way)
				}
				// A call started before (not by this decision) and not
				// running here: its result is unknown (a crash, a restart).
				// A tool that does not honour idempotency keys is not called
				// again before a person says so.
				if !em.emitted(stepSuffix(i, ss.Attempt, "started")) && !d.idempotent(st.Tool) {
					switch {
					case ss.ConfirmID != LostCallConfirmID(r.ID, i, ss.Attempt) || ss.Answer == nil:
						if r.Status != runstate.StatusPaused {
							d.askLostCall(r, i, ss.Attempt, em)
						}
						return done()
					case ss.Answer.Choice != ChoiceRunAgain:
						a := ss.Answer
						emit(events.RunResumed, stepSuffix(i, ss.Attempt, "resumed-lost"), events.RunResumedData{Step: st.Name, Index: i, ConfirmID: ss.ConfirmID, Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason})
						emit(events.RunStepFailed, stepSuffix(i, ss.Attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: ss.Attempt, Tool: st.Tool, Args: ss.Args,
							Error: events.ErrorInfo{Kind: "lost", Message: fmt.Sprintf("the result of this call was lost when heed restarted, and %s chose not to call %s again (it does not honour idempotency keys)", a.By, st.Tool)}})
						continue
					case r.Status == runstate.StatusPaused:
						a := ss.Answer
						emit(events.RunResumed, stepSuffix(i, ss.Attempt, "resumed-lost"), events.RunResumedData{Step: st.Name, Index: i, ConfirmID: ss.ConfirmID, Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason})
					}
				}
				out := done()
				out.Launch = &Launch{Index: i, Attempt: ss.Attempt, Step: st, Args: ss.Args}
				return out
			case skill.KindCompute:
				d.compute(r, i, ss.Attempt, em, f.Now)
			case skill.KindConfirm:
				if ss.Answer == nil {
					if r.Status != runstate.StatusPaused {
						d.askConfirm(r, i, ss.Attempt, em)
					}
					return done()
				}
				a := ss.Answer
				if a.Choice == "cancel" {
					// The run's own log records the answer it ended on, as
					// for any answer: readers of the run alone see it.
					emit(events.RunResumed, stepSuffix(i, ss.Attempt, "resumed"), events.RunResumedData{Step: st.Name, Index: i, ConfirmID: ss.ConfirmID, Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason})
					idx := i
					emit(events.RunCancelled, "cancelled", events.RunCancelledData{By: a.By, Reason: fmt.Sprintf("%q chosen at confirmation %s (%s)", a.Choice, ss.ConfirmID, a.Method), Step: st.Name, Index: &idx})
					return done()
				}
				emit(events.RunStepCompleted, stepSuffix(i, ss.Attempt, "completed"), events.StepCompletedData{Step: st.Name, Index: i, Attempt: ss.Attempt, Output: a.Choice})
				emit(events.RunResumed, stepSuffix(i, ss.Attempt, "resumed"), events.RunResumedData{Step: st.Name, Index: i, ConfirmID: ss.ConfirmID, Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason})
			}
		case runstate.StepFailed:
			// on_error: continue is StepDone and never lands here, unless
			// healing is still deciding.
			if h := r.Current(i); st.Kind == skill.KindTool && !h.OnErrorApplies() && d.healWait > 0 {
				switch {
				case h.Retry != nil:
					// The heal's retry: caused by heal.retried, whatever
					// event this decision started from.
					em.cause = h.RetryID
					d.startStep(r, i, h.Retry.NextAttempt, h.Retry.Args, ss.FailedID, em)
					em.cause = cause.ID()
					continue
				case h.Escalated != nil:
					if r.Status != runstate.StatusPaused {
						emit(events.RunPaused, stepSuffix(i, ss.Attempt, "paused-agent"), events.RunPausedData{Reason: events.PauseAwaitingAgent, Step: st.Name, Index: i, Message: firstLine(h.Escalated.Question, 500)})
					}
					return done()
				case h.Triggered != nil:
					reason := fmt.Sprintf("the healer did not finish within %s", d.healTimeout)
					if left := d.healTimeout - em.now.Sub(h.TriggeredAt); left > 0 {
						out := done()
						out.Wait = d.giveUp(r, i, ss.Attempt, left, reason)
						return out
					}
					emit(events.HealGaveUp, stepSuffix(i, ss.Attempt, "heal/gave_up"), events.HealGaveUpData{Step: st.Name, Index: i, Attempt: ss.Attempt, Reason: reason})
					continue
				default:
					reason := fmt.Sprintf("no verdict from the healer within %s", d.healWait)
					if left := d.healWait - em.now.Sub(ss.FailedAt); left > 0 {
						out := done()
						out.Wait = d.giveUp(r, i, ss.Attempt, left, reason)
						return out
					}
					emit(events.HealGaveUp, stepSuffix(i, ss.Attempt, "heal/gave_up"), events.HealGaveUpData{Step: st.Name, Index: i, Attempt: ss.Attempt, Reason: reason})
					continue
				}
			}
			if st.OnError == skill.OnErrorRetry && ss.Attempt < st.Retry.Attempts && st.Kind == skill.KindTool {
				next := ss.Attempt + 1
				if f.Calls(i, next) != CallNone {
					return done() // the retry is waiting out its backoff
				}
				ev, err := startEvent(r, i, next, ss.Args, ss.FailedID)
				if err != nil {
					d.log.Error("build event", "run", r.ID, "err", err)
					return done()
				}
				ev.SetTime(em.now)
				ev.SetExtension("causationid", em.cause)
				out := done()
				out.Launch = &Launch{Index: i, Attempt: next, Step: st, Args: ss.Args, Delay: st.Retry.Delay(ss.Attempt), Start: ev}
				return out
			}
			// One id per failed attempt: a retry that fails again fails the
			// run again. A failure already in the log means the run was
			// resumed for a retry whose new attempt is on its way.
			idx, suffix := i, stepSuffix(i, ss.Attempt, "run-failed")
			if !r.Applied(r.ID + "/" + suffix) {
				d.propose(r, em)
				emit(events.RunFailed, suffix, events.RunFailedData{Step: st.Name, Index: &idx, Error: *ss.Error, DurationMS: msBetween(r.RequestedAt, em.now)})
			}
			return done()
		}
	}
	return done()
}

// emitter builds the runner's events with ids derived from the run and
// applies each to the run as it goes.
type emitter struct {
	d     *decider
	r     *runstate.Run
	cause string
	now   time.Time
	out   []events.Event
}

func (m *emitter) emit(t events.Type, suffix string, data any) {
	ev, err := events.NewEvent(t, m.r.ID, m.r.ID+"/"+suffix, Source, data)
	if err != nil {
		m.d.log.Error("build event", "type", t, "err", err)
		return
	}
	ev.SetTime(m.now)
	ev.SetExtension("causationid", m.cause)
	// Our own events decode: applying them cannot fail.
	_ = m.r.Apply(&ev, 0, nil)
	m.out = append(m.out, ev)
}

// emitted reports whether this decision emitted the event with suffix.
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
	ev.SetTime(m.now)
	ev.SetExtension("causationid", m.cause)
	m.out = append(m.out, ev)
}

func stepSuffix(i, attempt int, what string) string {
	return fmt.Sprintf("s%d/a%d/%s", i, attempt, what)
}

// startStep emits step.started for attempt, plus what a tool step's args
// and the learned usage patterns say at once.
func (d *decider) startStep(r *runstate.Run, i, attempt int, args map[string]any, retryOf string, em *emitter) {
	st := r.Skill.Steps[i]
	data := events.StepStartedData{Step: st.Name, Index: i, Attempt: attempt, Kind: string(st.Kind), RetryOf: retryOf}
	if st.Kind == skill.KindTool {
		data.Tool = st.Tool
		data.IdempotencyKey = tool.IdempotencyKey(r.ID, i, attempt)
		if args == nil && st.Args != nil {
			v, err := st.Args.Render(r.Env())
			if err != nil {
				em.emit(events.RunStepStarted, stepSuffix(i, attempt, "started"), data)
				em.emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Tool: st.Tool, Error: events.ErrorInfo{Message: "args: " + err.Error(), Kind: "template"}})
				return
			}
			args, _ = v.(map[string]any)
		}
		if args == nil {
			args = map[string]any{}
		}
		data.Args, data.ArgsTruncated = truncateMap(args, maxFieldBytes)
		if d.deferred(r, i) {
			// Not called: queued for review (deferred.go).
			data.IdempotencyKey = ""
			em.emit(events.RunStepStarted, stepSuffix(i, attempt, "started"), data)
			if data.ArgsTruncated {
				em.emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Tool: st.Tool,
					Error: events.ErrorInfo{Message: fmt.Sprintf("args larger than %d bytes cannot be queued for review", maxFieldBytes), Kind: "review"}})
				return
			}
			d.queue(r, i, attempt, args, em)
			return
		}
		if data.ArgsTruncated {
			// The call is made from its step.started (after a crash, from
			// the log alone), and the log keeps only a preview of args this
			// large: the tool would be called with {"preview": …} instead
			// of its args. Refused, saying why.
			em.emit(events.RunStepStarted, stepSuffix(i, attempt, "started"), data)
			em.emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Tool: st.Tool,
				Error: events.ErrorInfo{Message: fmt.Sprintf("the call's args are larger than %d bytes (or nested deeper than %d), more than a step's event keeps: not called", maxFieldBytes, maxFieldDepth), Kind: "too_large"}})
			return
		}
		if d.learned != nil {
			for _, w := range d.learned.Warnings(st.Tool, args, em.now) {
				em.emit(events.RunWarning, stepSuffix(i, attempt, "warning/"+w.PatternID), events.RunWarningData{Step: st.Name, Index: i, Tool: st.Tool, PatternID: w.PatternID, Message: w.Message, Confidence: w.Confidence})
			}
		}
	}
	em.emit(events.RunStepStarted, stepSuffix(i, attempt, "started"), data)
}

// startEvent is the step.started of a tool step's next attempt, with args
// given (a retry's).
func startEvent(r *runstate.Run, i, attempt int, args map[string]any, retryOf string) (*events.Event, error) {
	st := r.Skill.Steps[i]
	data := events.StepStartedData{Step: st.Name, Index: i, Attempt: attempt, Kind: string(st.Kind), Tool: st.Tool, Args: args,
		IdempotencyKey: tool.IdempotencyKey(r.ID, i, attempt), RetryOf: retryOf}
	ev, err := events.NewEvent(events.RunStepStarted, r.ID, r.ID+"/"+stepSuffix(i, attempt, "started"), Source, data)
	return &ev, err
}

func (d *decider) compute(r *runstate.Run, i, attempt int, em *emitter, now func() time.Time) {
	st := r.Skill.Steps[i]
	start := now()
	v, err := st.Compute.Eval(r.Env())
	if err != nil {
		em.emit(events.RunStepFailed, stepSuffix(i, attempt, "failed"), events.StepFailedData{Step: st.Name, Index: i, Attempt: attempt, Error: events.ErrorInfo{Message: err.Error(), Kind: "expression"}})
		return
	}
	out, trunc := truncateValue(jsonable(v), maxFieldBytes)
	em.emit(events.RunStepCompleted, stepSuffix(i, attempt, "completed"), events.StepCompletedData{Step: st.Name, Index: i, Attempt: attempt, Output: out, OutputTruncated: trunc, DurationMS: msBetween(start, now())})
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
func (d *decider) idempotent(name string) bool {
	if d.tools == nil {
		return true
	}
	spec, ok := d.tools.Get(name)
	return !ok || spec.IsIdempotent()
}

// askLostCall pauses the run and asks a person whether a call whose result
// was lost may be made again: the tool does not honour idempotency keys,
// so it may already have done its work.
func (d *decider) askLostCall(r *runstate.Run, i, attempt int, em *emitter) {
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
		d.log.Error("build confirmation", "run", r.ID, "err", err)
		return
	}
	em.other(ev)
	em.emit(events.RunPaused, stepSuffix(i, attempt, "paused-lost"), events.RunPausedData{Reason: events.PauseAwaitingConfirmation, Step: st.Name, Index: i, ConfirmID: cid, Message: firstLine(msg, 500)})
}

func (d *decider) askConfirm(r *runstate.Run, i, attempt int, em *emitter) {
	st := r.Skill.Steps[i]
	c := st.Confirm
	env := r.Env()
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
		Context: confirmContext(r, i), Approvers: c.Approvers,
	}
	if c.Quorum != nil {
		req.Quorum = &events.Quorum{Required: c.Quorum.Required, Veto: c.Quorum.Veto}
	}
	ev, err := events.NewEvent(events.ConfirmRequested, cid, cid+"/requested", Source, req)
	if err != nil {
		d.log.Error("build confirmation", "run", r.ID, "err", err)
		return
	}
	em.other(ev)
	em.emit(events.RunPaused, stepSuffix(i, attempt, "paused"), events.RunPausedData{Reason: events.PauseAwaitingConfirmation, Step: st.Name, Index: i, ConfirmID: cid, Message: firstLine(msg, 500)})
}

// resultEvent is the event of a tool call's result.
func resultEvent(runID string, l *Launch, res tool.Result, now time.Time) (events.Event, error) {
	var ev events.Event
	var err error
	if res.Err == nil {
		out, trunc := truncateValue(res.Output, maxFieldBytes)
		ev, err = events.NewEvent(events.RunStepCompleted, runID, runID+"/"+stepSuffix(l.Index, l.Attempt, "completed"), Source,
			events.StepCompletedData{Step: l.Step.Name, Index: l.Index, Attempt: l.Attempt, Output: out, OutputTruncated: trunc, DurationMS: ms(res.Duration)})
	} else {
		msg, trunc := truncateString(res.Err.Message, maxFieldBytes)
		args, argsTrunc := truncateMap(l.Args, maxFieldBytes)
		out, _ := truncateValue(res.Output, maxFieldBytes/4)
		ev, err = events.NewEvent(events.RunStepFailed, runID, runID+"/"+stepSuffix(l.Index, l.Attempt, "failed"), Source,
			events.StepFailedData{Step: l.Step.Name, Index: l.Index, Attempt: l.Attempt, Tool: l.Step.Tool, Args: args, ArgsTruncated: argsTrunc,
				Error: events.ErrorInfo{Message: msg, Kind: res.Err.Kind, ExitCode: res.Err.ExitCode, Truncated: trunc}, Output: out, DurationMS: ms(res.Duration)})
	}
	ev.SetTime(now)
	// The result of the call the attempt's step.started made.
	ev.SetExtension("causationid", runID+"/"+stepSuffix(l.Index, l.Attempt, "started"))
	return ev, err
}

func (d *decider) completion(r *runstate.Run, now time.Time) events.RunCompletedData {
	c := events.RunCompletedData{DurationMS: msBetween(r.RequestedAt, now)}
	if r.Skill.Summary != nil {
		s, err := r.Skill.Summary.RenderString(r.Env())
		if err != nil {
			s = "(summary failed: " + err.Error() + ")"
		}
		c.Summary, _ = truncateString(s, maxFieldBytes)
	}
	outs, trunc := truncateMap(r.Outputs(), 4*maxFieldBytes)
	if len(outs) > 0 {
		c.Outputs, c.OutputsTruncated = outs, trunc
	}
	return c
}

// confirmContext is what an agent or person needs to decide: the recent
// steps and the values bound so far.
func confirmContext(r *runstate.Run, i int) map[string]any {
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
	vars, _ := truncateMap(r.Outputs(), 8*1024)
	inputs, _ := truncateMap(r.Inputs, 4*1024)
	return map[string]any{"recent_steps": recent, "variables": vars, "inputs": inputs}
}

// giveUp builds the wait that ends healing for one attempt.
func (d *decider) giveUp(r *runstate.Run, i, attempt int, after time.Duration, reason string) *Wait {
	st := r.Skill.Steps[i]
	ev, err := events.NewEvent(events.HealGaveUp, r.ID, r.ID+"/"+stepSuffix(i, attempt, "heal/gave_up"), Source,
		events.HealGaveUpData{Step: st.Name, Index: i, Attempt: attempt, Reason: reason})
	if err != nil {
		d.log.Error("build event", "err", err)
	}
	return &Wait{Key: flightKey(r.ID, i, attempt), After: after, Event: ev}
}

// knownIssues are the learned fixes for the skill's tools, published with
// the run so the agent and the person see what to watch for.
func (d *decider) knownIssues(sk *skill.Skill) []events.KnownIssue {
	if d.learned == nil {
		return nil
	}
	var tools []string
	seen := map[string]bool{}
	for _, st := range sk.Steps {
		if st.Kind == skill.KindTool && !seen[st.Tool] {
			seen[st.Tool] = true
			tools = append(tools, st.Tool)
		}
	}
	return d.learned.KnownIssues(tools)
}

func flightKey(run string, index, attempt int) string {
	return run + "/" + strconv.Itoa(index) + "/" + strconv.Itoa(attempt)
}
