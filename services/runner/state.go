package runner

import (
	"encoding/json"
	"fmt"
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

// StepState is one step as the log tells it.
type StepState struct {
	Status  string
	Attempt int
	Args    map[string]any
	Output  any
	Error   *events.ErrorInfo
	// ConfirmID is the confirmation a confirm step asked for.
	ConfirmID string
	// Answer is the confirmation's answer once it arrived.
	Answer *events.ConfirmAnsweredData
	// AnswerID is the id of the answer event.
	AnswerID string
	// RetryOf is the id of the step.failed event of the attempt the
	// current attempt retries.
	RetryOf string
	// FailedID is the id of the current attempt's step.failed event.
	FailedID string
	// StartedAt is when the current attempt started (the event's time).
	StartedAt time.Time
	// FailedAt is when the current attempt failed (the event's time).
	FailedAt time.Time
	// Heal is the healer's verdict on the current failed attempt.
	Heal HealState
}

// HealState is what the healer (or the runner, when the healer is silent)
// decided about one failed attempt.
type HealState struct {
	Attempt     int
	Triggered   bool
	TriggeredAt time.Time
	Retry       *events.HealRetriedData
	RetryID     string
	GaveUp      bool
	Escalated   *events.HealEscalatedData
	Declined    bool // the agent chose to let on_error apply
}

// Done reports whether the run may move past the step.
func (s StepState) done(st *skill.Step, healing bool) bool {
	switch s.Status {
	case StepCompleted, StepSkipped:
		return true
	case StepFailed:
		return st.OnError == skill.OnErrorContinue && (!healing || st.Kind != skill.KindTool || s.healDecided())
	}
	return false
}

// healDecided reports whether healing is over for the current attempt
// without a retry: on_error applies.
func (s StepState) healDecided() bool {
	return s.Heal.Attempt == s.Attempt && (s.Heal.GaveUp || s.Heal.Declined)
}

// RunState is a run's state: a fold of its events. The runner keeps nothing
// else; a Run is rebuilt from the log after any restart.
type RunState struct {
	ID          string
	Requested   bool // the runner drives it (else an outside agent does)
	Skill       *skill.Skill
	SkillName   string
	SkillErr    error // the skill in the requested event does not load
	Inputs      map[string]any
	Yes         bool
	Agent       string
	RequestedBy string
	RequestedAt time.Time
	Status      string
	Steps       []StepState
	Paused      *events.RunPausedData
	Failure     *events.ErrorInfo
	LastSeq     uint64
	LastAt      time.Time       // when the last stored event of the run happened
	LastID      string          // its id
	applied     map[string]bool // event ids folded in
}

// Terminal reports whether the run has finished.
func (r *RunState) Terminal() bool {
	switch r.Status {
	case StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

func newRun(id string) *RunState { return &RunState{ID: id, applied: map[string]bool{}} }

// Apply folds one event into the run. Applying an event twice is a no-op,
// and step transitions only move forward, so the runner may apply its own
// events as it publishes them and again when the log delivers them.
func (r *RunState) Apply(ev *events.Event, seq uint64, skills *skill.Cache) error {
	if seq > r.LastSeq {
		r.LastSeq, r.LastAt, r.LastID = seq, ev.Time(), ev.ID()
	}
	if r.applied[ev.ID()] {
		return nil
	}
	r.applied[ev.ID()] = true
	data := ev.Data()
	switch events.Type(ev.Type()) {
	case events.RunRequested:
		var d events.RunRequestedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		r.Requested = true
		r.SkillName, r.Inputs, r.Yes, r.Agent, r.RequestedBy, r.RequestedAt = d.Skill.Name, d.Inputs, d.Yes, d.Agent, d.RequestedBy, ev.Time()
		if r.Status == "" {
			r.Status = StatusRequested
		}
		sk, err := skills.Load(d.Skill.File, d.Skill.Source, d.Skill.Digest)
		if err != nil {
			r.SkillErr = err
			return nil
		}
		r.Skill = sk
		if len(r.Steps) < len(sk.Steps) {
			r.Steps = append(r.Steps, make([]StepState, len(sk.Steps)-len(r.Steps))...)
		}
	case events.RunStarted:
		var d events.RunStartedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if r.SkillName == "" {
			r.SkillName = d.Skill
		}
		if r.Status == "" || r.Status == StatusRequested {
			r.Status = StatusRunning
		}
	case events.RunStepStarted:
		var d events.StepStartedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		s := r.step(d.Index)
		if s == nil {
			return nil
		}
		if d.Attempt > s.Attempt || (d.Attempt == s.Attempt && s.Status == StepPending) {
			*s = StepState{Status: StepStarted, Attempt: d.Attempt, Args: d.Args, RetryOf: d.RetryOf, StartedAt: ev.Time()}
		}
	case events.RunStepCompleted:
		var d events.StepCompletedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if s := r.step(d.Index); s != nil && d.Attempt >= s.Attempt {
			s.Status, s.Attempt, s.Output, s.Error = StepCompleted, d.Attempt, d.Output, nil
		}
	case events.RunStepFailed:
		var d events.StepFailedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if s := r.step(d.Index); s != nil && d.Attempt >= s.Attempt && s.Status != StepCompleted {
			e := d.Error
			s.Status, s.Attempt, s.Error, s.Output, s.FailedAt, s.FailedID = StepFailed, d.Attempt, &e, d.Output, ev.Time(), ev.ID()
			if d.Args != nil {
				s.Args = d.Args
			}
		}
	case events.HealTriggered, events.HealRetried, events.HealGaveUp, events.HealEscalated:
		var ref struct {
			Index   int `json:"index"`
			Attempt int `json:"attempt"`
		}
		if err := json.Unmarshal(data, &ref); err != nil {
			return err
		}
		s := r.step(ref.Index)
		if s == nil || s.Attempt != ref.Attempt || s.Status != StepFailed {
			return nil // about an attempt that is no longer current
		}
		h := &s.Heal
		if h.Attempt != ref.Attempt {
			*h = HealState{Attempt: ref.Attempt}
		}
		if h.GaveUp || h.Retry != nil {
			return nil // the verdict is in
		}
		switch events.Type(ev.Type()) {
		case events.HealTriggered:
			h.Triggered, h.TriggeredAt = true, ev.Time()
		case events.HealRetried:
			var d events.HealRetriedData
			if err := json.Unmarshal(data, &d); err != nil {
				return err
			}
			h.Retry, h.RetryID = &d, ev.ID()
		case events.HealGaveUp:
			h.GaveUp = true
		case events.HealEscalated:
			var d events.HealEscalatedData
			if err := json.Unmarshal(data, &d); err != nil {
				return err
			}
			h.Escalated = &d
		}
	case events.RunStepSkipped:
		var d events.StepSkippedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if s := r.step(d.Index); s != nil && s.Status == StepPending {
			s.Status = StepSkipped
		}
	case events.RunPaused:
		var d events.RunPausedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if !r.Terminal() {
			r.Status, r.Paused = StatusPaused, &d
			if s := r.step(d.Index); s != nil && d.ConfirmID != "" {
				s.ConfirmID = d.ConfirmID
			}
		}
	case events.RunResumed:
		var d events.RunResumedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if d.Choice == ChoiceOnError {
			if s := r.step(d.Index); s != nil && s.Status == StepFailed {
				s.Heal.Declined = true
			}
		}
		// The answer a run resumed on is kept with its step: the answer
		// itself is in the confirmation's log, not the run's.
		if s := r.step(d.Index); s != nil && d.ConfirmID != "" && s.ConfirmID == d.ConfirmID && s.Answer == nil {
			s.Answer = &events.ConfirmAnsweredData{Choice: d.Choice, Method: d.Method, By: d.By, Reason: d.Reason}
		}
		r.Paused = nil
		if r.Status == StatusPaused || r.Status == StatusFailed {
			r.Status, r.Failure = StatusRunning, nil
		}
	case events.RunCompleted:
		r.Status = StatusCompleted
	case events.RunFailed:
		var d events.RunFailedData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		if !r.Terminal() {
			r.Status, r.Failure = StatusFailed, &d.Error
		}
	case events.RunCancelled:
		if !r.Terminal() {
			r.Status = StatusCancelled
		}
	case events.ConfirmAnswered:
		var d events.ConfirmAnsweredData
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		for i := range r.Steps {
			if r.Steps[i].ConfirmID == ev.Subject() && r.Steps[i].Answer == nil {
				r.Steps[i].Answer, r.Steps[i].AnswerID = &d, ev.ID()
			}
		}
	}
	return nil
}

func (r *RunState) step(i int) *StepState {
	if i < 0 || i >= len(r.Steps) {
		if r.Skill == nil && i >= 0 && i < skill.MaxSteps {
			// An agent-driven run: grow as steps appear.
			r.Steps = append(r.Steps, make([]StepState, i+1-len(r.Steps))...)
			return &r.Steps[i]
		}
		return nil
	}
	return &r.Steps[i]
}

// env is the expression environment at this point of the run.
func (r *RunState) env() map[string]any {
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

// outputs are the values bound by step outputs.
func (r *RunState) outputs() map[string]any {
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

// Summary describes the run for errors.
func (r *RunState) String() string {
	return fmt.Sprintf("run %s (%s, %s)", r.ID, r.SkillName, r.Status)
}
