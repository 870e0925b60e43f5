// Package runstate is the one fold of a run's history: the state of a run
// derived from its events, as the runner, the healer, the indexer and the
// CLI all read it. Nothing here performs an effect; Apply is a pure
// function of the events applied so far, so any reader that applies the
// same events in log order sees the same run.
package runstate

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/skill"
)

// Run statuses.
const (
	StatusRequested = "requested"
	StatusRunning   = "running"
	StatusPaused    = "paused"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	// StatusAbandoned: the run had no event for the runner's idle time
	// (heed.run.abandoned). Like a completed or cancelled run it stays put.
	StatusAbandoned = "abandoned"
)

// ChoiceOnError is what `continue` on a run awaiting its agent records: the
// agent lets the failed step's on_error apply.
const ChoiceOnError = "on_error"

// Step statuses.
const (
	StepPending   = ""
	StepStarted   = "started"
	StepCompleted = "completed"
	StepFailed    = "failed"
	StepSkipped   = "skipped"
)

// MaxRecent is how many step outcomes Recent keeps.
const MaxRecent = 5

// Step is a step's current attempt as the log tells it.
type Step struct {
	// Name is the step's name as its events give it (an agent's run has
	// no skill to name its steps).
	Name    string            `json:"name,omitempty"`
	Status  string            `json:"status,omitempty"`
	Attempt int               `json:"attempt,omitempty"`
	Args    map[string]any    `json:"args,omitempty"`
	Output  any               `json:"output,omitempty"`
	Error   *events.ErrorInfo `json:"error,omitempty"`
	// ConfirmID is the confirmation the step asked for.
	ConfirmID string `json:"confirm_id,omitempty"`
	// Answer is the confirmation's answer once it arrived: what the run
	// records of it when it resumes (choice, method, by, reason), so a
	// reader of the run's log alone sees the same answer as the runner.
	Answer *events.ConfirmAnsweredData `json:"answer,omitempty"`
	// AnswerFromRun: Answer came from a resumed event in the run's own
	// log, not from the confirmation's answer, before the step completed.
	// Anyone who may write the run's subjects can write a resumed event,
	// so the runner checks such an answer against the confirmation's log
	// before it acts on it (services/runner).
	AnswerFromRun bool `json:"answer_from_run,omitempty"`
	// RetryOf is the id of the step.failed event of the attempt the
	// current attempt retries.
	RetryOf string `json:"retry_of,omitempty"`
	// FailedID is the id of the current attempt's step.failed event.
	FailedID string `json:"failed_id,omitempty"`
	// StartedAt and FailedAt are the times of the current attempt's events.
	StartedAt time.Time `json:"started_at,omitzero"`
	FailedAt  time.Time `json:"failed_at,omitzero"`
	// ResumedBy is who last resumed the run at this step (a retry's author).
	ResumedBy string `json:"resumed_by,omitempty"`
}

// Attempt is one attempt of one step: what happened to it, and what
// healing decided about it once it failed.
type Attempt struct {
	Started   *events.StepStartedData `json:"started,omitempty"`
	Failed    *events.StepFailedData  `json:"failed,omitempty"`
	FailedID  string                  `json:"failed_id,omitempty"`
	Completed bool                    `json:"completed,omitempty"`

	Triggered   *events.HealTriggeredData  `json:"triggered,omitempty"`
	TriggeredAt time.Time                  `json:"triggered_at,omitzero"`
	FixApplied  *events.HealFixAppliedData `json:"fix_applied,omitempty"`
	// Retry and GaveUp are healing's verdicts: the first one in the log
	// stands, and nothing about the attempt's healing changes after it.
	Retry     *events.HealRetriedData   `json:"retry,omitempty"`
	RetryID   string                    `json:"retry_id,omitempty"`
	GaveUp    bool                      `json:"gave_up,omitempty"`
	Escalated *events.HealEscalatedData `json:"escalated,omitempty"`
	Healed    bool                      `json:"healed,omitempty"`
	// Declined: the agent chose to let on_error apply.
	Declined bool `json:"declined,omitempty"`
}

// Verdict reports whether healing has decided the attempt: a retry, or
// giving up.
func (a *Attempt) Verdict() bool { return a.Retry != nil || a.GaveUp }

// Decided reports whether healing of the attempt has an outcome: a verdict
// or the question handed to the agent.
func (a *Attempt) Decided() bool { return a.Verdict() || a.Escalated != nil }

// OnErrorApplies reports whether healing is over for the attempt without a
// retry.
func (a *Attempt) OnErrorApplies() bool { return a.GaveUp || a.Declined }

// Run is a run's state: a fold of its events. The runner keeps nothing
// else; a Run is rebuilt from the log after any restart.
type Run struct {
	ID          string                   `json:"id"`
	Requested   bool                     `json:"requested,omitempty"` // the runner drives it (else an outside agent does)
	Driver      string                   `json:"driver,omitempty"`
	Skill       *skill.Skill             `json:"-"`
	SkillName   string                   `json:"skill,omitempty"`
	SkillErr    error                    `json:"-"` // the skill in the requested event does not load
	Inputs      map[string]any           `json:"inputs,omitempty"`
	Yes         bool                     `json:"yes,omitempty"`
	Agent       string                   `json:"agent,omitempty"`
	RequestedBy string                   `json:"requested_by,omitempty"`
	RequestedAt time.Time                `json:"requested_at,omitzero"`
	Status      string                   `json:"status,omitempty"`
	Steps       []Step                   `json:"steps,omitempty"`
	Attempts    map[int]map[int]*Attempt `json:"attempts,omitempty"` // step index → attempt number → attempt
	Paused      *events.RunPausedData    `json:"paused,omitempty"`
	Failure     *events.ErrorInfo        `json:"failure,omitempty"`
	// Failures counts the times the run failed (a retry may reopen a
	// failed run): each end proposes the change items queued before it,
	// and items queued after a reopening go to the next round's set
	// (events.RunChangeSetRoundID).
	Failures int `json:"failures,omitempty"`
	// Abandoned is why the run ended abandoned (no event for the runner's
	// idle time).
	Abandoned *events.RunAbandonedData `json:"abandoned,omitempty"`
	// Recent are the last step outcomes, oldest first: the context an
	// agent or a person gets with a question.
	Recent  []Outcome `json:"recent,omitempty"`
	LastSeq uint64    `json:"last_seq,omitempty"`
	LastAt  time.Time `json:"last_at,omitzero"` // when the last stored event of the run happened
	LastID  string    `json:"last_id,omitempty"`
	applied map[string]bool
	// seqs are the log positions of the run's own messages
	// (heed.run.<id>.>) folded so far, ascending: where to read them
	// again (Replay) without a read by subject from the middle of the
	// log.
	seqs []uint64
}

// Outcome is one step's outcome, for Recent.
type Outcome struct {
	Step   string `json:"step"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// New is the state of a run before its first event.
func New(id string) *Run {
	return &Run{ID: id, applied: map[string]bool{}, Attempts: map[int]map[int]*Attempt{}}
}

// Terminal reports whether the run has finished.
func (r *Run) Terminal() bool { return Terminal(r.Status) }

// Terminal reports whether a run status is an end. A failed run may be
// reopened by a retry; the others stay put.
func Terminal(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusAbandoned:
		return true
	}
	return false
}

// Applied reports whether the event with this id has been folded in.
func (r *Run) Applied(id string) bool { return r.applied[id] }

// Attempt is attempt n of step index, or nil.
func (r *Run) Attempt(index, n int) *Attempt { return r.Attempts[index][n] }

// Current is the current attempt of step index: never nil.
func (r *Run) Current(index int) *Attempt {
	if index < 0 || index >= len(r.Steps) {
		return &Attempt{}
	}
	if a := r.Attempt(index, r.Steps[index].Attempt); a != nil {
		return a
	}
	return &Attempt{}
}

// HealRetries counts the heal retries of a step.
func (r *Run) HealRetries(index int) int {
	n := 0
	for _, a := range r.Attempts[index] {
		if a.Retry != nil {
			n++
		}
	}
	return n
}

// NextStatus is a run's status after an event of type t, given its status
// cur: the one state machine of a run's status, which the index shares.
// Completed, cancelled and abandoned runs stay put; a failed run is reopened only by
// a retry (run.resumed, or a step.started of a new attempt); a step that
// starts ends a pause.
func NextStatus(cur string, t events.Type) string {
	switch cur {
	case StatusCompleted, StatusCancelled, StatusAbandoned:
		return cur
	case StatusFailed:
		if t != events.RunResumed && t != events.RunStepStarted {
			return cur
		}
	}
	switch t {
	case events.RunRequested:
		if cur == "" {
			return StatusRequested
		}
	case events.RunStarted:
		if cur == "" || cur == StatusRequested {
			return StatusRunning
		}
	case events.RunResumed:
		if cur == StatusPaused || cur == StatusFailed {
			return StatusRunning
		}
	case events.RunStepStarted:
		if cur == "" || cur == StatusRequested || cur == StatusPaused || cur == StatusFailed {
			return StatusRunning
		}
	case events.RunPaused:
		return StatusPaused
	case events.RunCompleted:
		return StatusCompleted
	case events.RunFailed:
		return StatusFailed
	case events.RunCancelled:
		return StatusCancelled
	case events.RunAbandoned:
		return StatusAbandoned
	}
	if cur == "" {
		return StatusRunning // an agent's run may begin with any event
	}
	return cur
}

// Apply folds one event into the run. Applying an event twice is a no-op,
// and step transitions only move forward, so the runner may apply its own
// events as it publishes them and again when the log delivers them. seq is
// the event's position in the log (0: not yet stored). An event whose data
// does not decode is an error: it should have been refused at the door.
func (r *Run) Apply(ev *events.Event, seq uint64, skills *skill.Cache) error {
	if seq > r.LastSeq {
		r.LastSeq, r.LastAt, r.LastID = seq, ev.Time(), ev.ID()
	}
	if seq > 0 && events.Type(ev.Type()).Kind() == "run" && ev.Subject() == r.ID {
		r.noteSeq(seq)
	}
	if r.applied[ev.ID()] {
		return nil
	}
	r.applied[ev.ID()] = true
	t := events.Type(ev.Type())
	if t.Kind() == "run" {
		next := NextStatus(r.Status, t)
		if next != r.Status {
			if next == StatusRunning {
				r.Paused, r.Failure = nil, nil
			}
			if next == StatusFailed {
				r.Failures++
			}
			r.Status = next
		}
	}
	data := ev.Data()
	switch t {
	case events.RunAbandoned:
		if r.Status == StatusAbandoned && r.Abandoned == nil {
			var d events.RunAbandonedData
			if err := json.Unmarshal(data, &d); err != nil {
				return err
			}
			r.Abandoned = &d
		}
	case events.RunRequested:
		var d events.RunRequestedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		r.Requested, r.Driver = true, "runner"
		r.SkillName, r.Inputs, r.Yes, r.Agent, r.RequestedBy, r.RequestedAt = d.Skill.Name, d.Inputs, d.Yes, d.Agent, d.RequestedBy, ev.Time()
		sk, err := skills.Load(d.Skill.File, d.Skill.Source)
		if err != nil {
			r.SkillErr = err
			return nil
		}
		r.Skill = sk
		if len(r.Steps) < len(sk.Steps) {
			r.Steps = append(r.Steps, make([]Step, len(sk.Steps)-len(r.Steps))...)
		}
	case events.RunStarted:
		var d events.RunStartedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if r.Driver == "" {
			r.Driver = d.Driver
		}
		if r.SkillName == "" {
			r.SkillName = d.Skill
		}
		if r.Agent == "" {
			r.Agent = d.Agent
		}
		if d.Driver == "agent" && r.Agent == "" {
			r.Agent = ev.Source()
		}
	case events.RunStepStarted:
		var d events.StepStartedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		s := r.named(d.Index, d.Step)
		if s == nil {
			return nil
		}
		if a := r.attempt(d.Index, d.Attempt); a != nil && a.Started == nil {
			a.Started = &d
		}
		if d.Attempt > s.Attempt || (d.Attempt == s.Attempt && s.Status == StepPending) {
			*s = Step{Name: s.Name, Status: StepStarted, Attempt: d.Attempt, Args: d.Args, RetryOf: d.RetryOf, StartedAt: ev.Time(), ResumedBy: s.ResumedBy}
		}
	case events.RunStepCompleted:
		var d events.StepCompletedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		s := r.named(d.Index, d.Step)
		if s == nil {
			return nil
		}
		if a := r.attempt(d.Index, d.Attempt); a != nil {
			a.Completed = true
		}
		r.note(Outcome{Step: d.Step, Status: StepCompleted})
		if d.Attempt >= s.Attempt {
			s.Status, s.Attempt, s.Output, s.Error = StepCompleted, d.Attempt, d.Output, nil
			if r.Skill != nil && d.Index < len(r.Skill.Steps) && r.Skill.Steps[d.Index].Kind == skill.KindConfirm && (s.Answer == nil || s.AnswerFromRun) {
				// A confirm step completes on its confirmation's answer;
				// one this reader has not seen (it reads the run's log
				// alone, or anyone wrote this) is the run's word for it.
				if s.Answer == nil {
					s.Answer = &events.ConfirmAnsweredData{Choice: skill.Stringify(d.Output)}
				}
				s.AnswerFromRun = true
			}
		}
	case events.RunStepFailed:
		var d events.StepFailedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		s := r.named(d.Index, d.Step)
		if s == nil {
			return nil
		}
		if a := r.attempt(d.Index, d.Attempt); a != nil && !a.Completed {
			a.Failed, a.FailedID = &d, ev.ID()
		}
		r.note(Outcome{Step: d.Step, Status: StepFailed, Error: d.Error.Message})
		if d.Attempt >= s.Attempt && s.Status != StepCompleted {
			e := d.Error
			s.Status, s.Attempt, s.Error, s.Output, s.FailedAt, s.FailedID = StepFailed, d.Attempt, &e, d.Output, ev.Time(), ev.ID()
			if d.Args != nil {
				s.Args = d.Args
			}
		}
	case events.HealTriggered, events.HealFixApplied, events.HealRetried, events.HealGaveUp, events.HealEscalated, events.HealHealed:
		return r.applyHeal(t, ev)
	case events.RunStepSkipped:
		var d events.StepSkippedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if s := r.named(d.Index, d.Step); s != nil && s.Status == StepPending {
			s.Status = StepSkipped
		}
	case events.RunPaused:
		var d events.RunPausedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if r.Status == StatusPaused {
			r.Paused = &d
			if s := r.step(d.Index); s != nil && d.ConfirmID != "" {
				if s.AnswerFromRun && (s.ConfirmID == d.ConfirmID || s.ConfirmID == "") {
					// Paused again at the same confirmation: the resume
					// (or completion) had no answer behind it.
					s.Answer, s.AnswerFromRun = nil, false
					if s.Status == StepCompleted {
						s.Status, s.Output = StepStarted, nil
						if a := r.attempt(d.Index, s.Attempt); a != nil {
							a.Completed = false
						}
					}
				}
				s.ConfirmID = d.ConfirmID
			}
		}
	case events.RunResumed:
		var d events.RunResumedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		r.Paused = nil
		s := r.step(d.Index)
		if s == nil {
			return nil
		}
		s.ResumedBy = d.By
		if d.Choice == ChoiceOnError && s.Status == StepFailed {
			if a := r.attempt(d.Index, s.Attempt); a != nil {
				a.Declined = true
			}
		}
		// The answer a run resumed on is kept with its step: the answer
		// itself is in the confirmation's log, not the run's.
		if d.ConfirmID != "" && s.ConfirmID == d.ConfirmID && (s.Answer == nil || s.AnswerFromRun) {
			// The run's word for the answer (a completion says only the
			// choice; the resume says who and how), until the confirmation
			// itself backs it.
			s.Answer = &events.ConfirmAnsweredData{Choice: d.Choice, Method: d.Method, By: d.By, Reason: d.Reason}
			s.AnswerFromRun = s.AnswerFromRun || s.Status != StepCompleted
		}
	case events.RunFailed:
		var d events.RunFailedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if r.Status == StatusFailed {
			r.Failure = &d.Error
		}
	case events.ConfirmAnswered:
		var d events.ConfirmAnsweredData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		for i := range r.Steps {
			if s := &r.Steps[i]; s.ConfirmID == ev.Subject() && (s.Answer == nil || s.AnswerFromRun) {
				// The confirmation's own answer (the runner folds one only
				// once it took effect) stands over a resume's word.
				s.Answer, s.AnswerFromRun = &events.ConfirmAnsweredData{Choice: d.Choice, Method: d.Method, By: d.By, Reason: d.Reason}, false
			}
		}
	}
	return nil
}

// applyHeal folds a healing event into the attempt it is about. Healing
// concerns a failed attempt: an event about an attempt that has not failed
// is about nothing, and after the verdict nothing but the outcome changes.
func (r *Run) applyHeal(t events.Type, ev *events.Event) error {
	var ref struct {
		Index   int `json:"index"`
		Attempt int `json:"attempt"`
	}
	if err := json.Unmarshal(ev.Data(), &ref); err != nil {
		return err
	}
	a := r.Attempt(ref.Index, ref.Attempt)
	if t == events.HealHealed {
		if a != nil {
			a.Healed = true
		}
		return nil
	}
	if a == nil || a.Failed == nil || a.Verdict() {
		return nil
	}
	switch t {
	case events.HealTriggered:
		var d events.HealTriggeredData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return err
		}
		if a.Triggered == nil {
			a.Triggered, a.TriggeredAt = &d, ev.Time()
		}
	case events.HealFixApplied:
		var d events.HealFixAppliedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return err
		}
		if a.FixApplied == nil {
			a.FixApplied = &d
		}
	case events.HealRetried:
		var d events.HealRetriedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return err
		}
		a.Retry, a.RetryID = &d, ev.ID()
	case events.HealGaveUp:
		a.GaveUp = true
	case events.HealEscalated:
		var d events.HealEscalatedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return err
		}
		a.Escalated = &d
	}
	return nil
}

func (r *Run) note(o Outcome) {
	r.Recent = append(r.Recent, o)
	if len(r.Recent) > MaxRecent {
		r.Recent = r.Recent[len(r.Recent)-MaxRecent:]
	}
}

// named is step i (see step), named.
func (r *Run) named(i int, name string) *Step {
	s := r.step(i)
	if s != nil && name != "" && s.Name == "" {
		s.Name = name
	}
	return s
}

// step is step i, growing an agent-driven run's steps as they appear;
// nil for an index the run cannot have.
func (r *Run) step(i int) *Step {
	if i < 0 || i >= len(r.Steps) {
		if r.Skill == nil && i >= 0 && i < skill.MaxSteps {
			r.Steps = append(r.Steps, make([]Step, i+1-len(r.Steps))...)
			return &r.Steps[i]
		}
		return nil
	}
	return &r.Steps[i]
}

// attempt is attempt n of step index, made on first sight; nil for an
// attempt number no writer may use.
func (r *Run) attempt(index, n int) *Attempt {
	if n < 1 || n > MaxAttempts {
		return nil
	}
	m := r.Attempts[index]
	if m == nil {
		m = map[int]*Attempt{}
		r.Attempts[index] = m
	}
	a := m[n]
	if a == nil {
		a = &Attempt{}
		m[n] = a
	}
	return a
}

// MaxAttempts bounds the attempts of one step the fold keeps a record of.
const MaxAttempts = 10_000

// StepDone reports whether the run may move past step i. With healing, a
// failed tool step whose on_error is continue waits for healing's verdict.
func (r *Run) StepDone(i int, healing bool) bool {
	st, s := r.Skill.Steps[i], r.Steps[i]
	switch s.Status {
	case StepCompleted, StepSkipped:
		return true
	case StepFailed:
		return st.OnError == skill.OnErrorContinue && (!healing || st.Kind != skill.KindTool || r.Current(i).OnErrorApplies())
	}
	return false
}

// Next is the index of the first step the run has not moved past
// (len(Steps): none is left).
func (r *Run) Next(healing bool) int {
	for i := range r.Skill.Steps {
		if !r.StepDone(i, healing) {
			return i
		}
	}
	return len(r.Steps)
}

// Env is the expression environment at this point of the run.
func (r *Run) Env() map[string]any {
	env := map[string]any{
		"inputs": r.Inputs,
		"run":    map[string]any{"id": r.ID, "skill": r.SkillName},
	}
	steps := map[string]any{}
	if r.Skill != nil {
		for i, st := range r.Skill.Steps {
			s := r.Steps[i]
			if st.Output != "" {
				if _, ok := env[st.Output]; !ok {
					env[st.Output] = nil
				}
				if s.Status == StepCompleted {
					env[st.Output] = s.Output
				}
			}
			entry := map[string]any{"status": s.Status, "output": s.Output, "attempt": s.Attempt}
			if s.Error != nil {
				entry["error"] = s.Error.Message
			} else {
				entry["error"] = nil
			}
			steps[st.Name] = entry
		}
	}
	env["steps"] = steps
	return env
}

// Outputs are the values bound by step outputs.
func (r *Run) Outputs() map[string]any {
	out := map[string]any{}
	if r.Skill == nil {
		return out
	}
	for i, st := range r.Skill.Steps {
		if st.Output != "" && r.Steps[i].Status == StepCompleted {
			out[st.Output] = r.Steps[i].Output
		}
	}
	return out
}

// String describes the run for errors.
func (r *Run) String() string {
	return fmt.Sprintf("run %s (%s, %s)", r.ID, r.SkillName, r.Status)
}

// Snapshot is the run's state as JSON, without how far its reader has
// read (LastSeq, LastAt, LastID: a reader of the run's subject alone and
// the runner, which also reads answers, stop at different positions) and
// where it read an answer (AnswerFromRun: the runner reads the
// confirmation's too). Two readers that applied the same run's events
// have equal snapshots.
func (r *Run) Snapshot() ([]byte, error) {
	c := *r
	c.LastSeq, c.LastAt, c.LastID = 0, time.Time{}, ""
	if slices.ContainsFunc(r.Steps, func(s Step) bool { return s.AnswerFromRun }) {
		c.Steps = slices.Clone(r.Steps)
		for i := range c.Steps {
			c.Steps[i].AnswerFromRun = false
		}
	}
	skillErr := ""
	if r.SkillErr != nil {
		skillErr = r.SkillErr.Error()
	}
	return json.Marshal(struct {
		*Run
		SkillError string `json:"skill_error,omitempty"`
	}{&c, skillErr})
}
