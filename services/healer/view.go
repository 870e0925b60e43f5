package healer

import (
	"context"
	"encoding/json"

	"github.com/heedhq/heed/events"
)

// attempt is one attempt of one step, as the log tells it.
type attempt struct {
	started   *events.StepStartedData
	failed    *events.StepFailedData
	failedID  string
	completed bool

	triggered  *events.HealTriggeredData
	fixApplied bool
	retried    *events.HealRetriedData
	retriedID  string
	gaveUp     bool
	escalated  bool
	healed     bool
}

// decided reports whether healing of this attempt has an outcome.
func (a *attempt) decided() bool { return a.retried != nil || a.gaveUp || a.escalated }

// runView is what the healer needs of a run.
type runView struct {
	id        string
	requested bool // driven by the runner
	driver    string
	skill     string
	agent     string
	terminal  bool
	steps     map[int]map[int]*attempt
	resumedBy map[int]string // who last resumed a step (a retry's author)
	recent    []map[string]any
}

func (v *runView) at(index, n int) *attempt {
	m := v.steps[index]
	if m == nil {
		m = map[int]*attempt{}
		v.steps[index] = m
	}
	a := m[n]
	if a == nil {
		a = &attempt{}
		m[n] = a
	}
	return a
}

// loadRun folds a run's history from the log.
func loadRun(ctx context.Context, bus *events.Bus, id string) (*runView, error) {
	v := &runView{id: id, steps: map[int]map[int]*attempt{}, resumedBy: map[int]string{}}
	_, err := events.ReadLog(ctx, bus.JetStream(), events.EventStream, []string{events.SubjectFilter("run", id)}, 0, func(raw events.RawMsg) error {
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			return nil
		}
		v.apply(ev)
		return nil
	})
	return v, err
}

func (v *runView) apply(ev *events.Event) {
	b := ev.Data()
	var ref struct {
		Index   int `json:"index"`
		Attempt int `json:"attempt"`
	}
	_ = json.Unmarshal(b, &ref)
	switch events.Type(ev.Type()) {
	case events.RunRequested:
		var d events.RunRequestedData
		if json.Unmarshal(b, &d) == nil {
			v.requested, v.skill, v.agent = true, d.Skill.Name, d.Agent
		}
	case events.RunStarted:
		var d events.RunStartedData
		if json.Unmarshal(b, &d) == nil {
			v.driver = d.Driver
			if v.skill == "" {
				v.skill = d.Skill
			}
			if v.agent == "" {
				v.agent = d.Agent
			}
			if d.Driver == "agent" && v.agent == "" {
				v.agent = ev.Source()
			}
		}
	case events.RunStepStarted:
		var d events.StepStartedData
		if json.Unmarshal(b, &d) == nil {
			v.at(d.Index, d.Attempt).started = &d
		}
	case events.RunStepFailed:
		var d events.StepFailedData
		if json.Unmarshal(b, &d) == nil {
			a := v.at(d.Index, d.Attempt)
			a.failed, a.failedID = &d, ev.ID()
			v.note(map[string]any{"step": d.Step, "status": "failed", "error": d.Error.Message})
		}
	case events.RunStepCompleted:
		var d events.StepCompletedData
		if json.Unmarshal(b, &d) == nil {
			v.at(d.Index, d.Attempt).completed = true
			v.note(map[string]any{"step": d.Step, "status": "completed"})
		}
	case events.RunResumed:
		var d events.RunResumedData
		if json.Unmarshal(b, &d) == nil {
			v.resumedBy[d.Index] = d.By
		}
	case events.HealTriggered:
		var d events.HealTriggeredData
		if json.Unmarshal(b, &d) == nil {
			v.at(ref.Index, ref.Attempt).triggered = &d
		}
	case events.HealFixApplied:
		v.at(ref.Index, ref.Attempt).fixApplied = true
	case events.HealRetried:
		var d events.HealRetriedData
		if json.Unmarshal(b, &d) == nil {
			a := v.at(ref.Index, ref.Attempt)
			a.retried, a.retriedID = &d, ev.ID()
		}
	case events.HealGaveUp:
		v.at(ref.Index, ref.Attempt).gaveUp = true
	case events.HealEscalated:
		v.at(ref.Index, ref.Attempt).escalated = true
	case events.HealHealed:
		v.at(ref.Index, ref.Attempt).healed = true
	case events.RunCompleted, events.RunFailed, events.RunCancelled:
		v.terminal = true
	}
}

func (v *runView) note(entry map[string]any) {
	v.recent = append(v.recent, entry)
	if len(v.recent) > 5 {
		v.recent = v.recent[1:]
	}
}

// heals counts the heal retries of a step.
func (v *runView) heals(index int) int {
	n := 0
	for _, a := range v.steps[index] {
		if a.retried != nil {
			n++
		}
	}
	return n
}

// retryFix is the heal that asked for attempt n of a step, if any: the
// previous attempt's heal.retried, when attempt n runs with its args.
func (v *runView) retryFix(index, n int) (*attempt, bool) {
	a := v.steps[index][n]
	prev := v.steps[index][n-1]
	if a == nil || a.started == nil || prev == nil || prev.retried == nil {
		return nil, false
	}
	return prev, sameArgs(a.started.Args, prev.retried.Args)
}
