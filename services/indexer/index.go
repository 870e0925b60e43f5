// Package indexer keeps the index projection: one entry per aggregate (run
// or confirmation) with its kind, first and last event, status and event
// count. Because it consumes every event subject, it is also where bad
// input from outside publishers is caught and dead-lettered within moments
// of entering the log, whether or not any other service cares about it.
package indexer

import (
	"context"
	"encoding/json"
	"time"

	"github.com/heedhq/heed/events"
)

// Bucket is the index's KV bucket; keys are <kind>.<aggregate-id>.
const Bucket = "heed_index"

// Key is the index key of an aggregate.
func Key(kind, id string) string { return kind + "." + id }

// EventRef points at one event in the log.
type EventRef struct {
	ID   string    `json:"id"`
	Type string    `json:"type"`
	Time time.Time `json:"time"`
}

// Entry is the index's view of one aggregate.
type Entry struct {
	ID     string   `json:"id"`
	Kind   string   `json:"kind"`
	Status string   `json:"status"`
	Count  int      `json:"count"`
	First  EventRef `json:"first"`
	Last   EventRef `json:"last"`
	// Run fields.
	Skill  string `json:"skill,omitempty"`
	Driver string `json:"driver,omitempty"`
	Step   string `json:"step,omitempty"` // the step last reported
	// Confirmation fields.
	RunID  string `json:"run_id,omitempty"`
	Choice string `json:"choice,omitempty"`
	Method string `json:"method,omitempty"`
}

// Terminal reports whether the aggregate has finished.
func (e Entry) Terminal() bool {
	switch e.Status {
	case "completed", "failed", "cancelled", "answered":
		return true
	}
	return false
}

// Projection is the index projection.
type Projection struct{}

func (Projection) Name() string      { return "index" }
func (Projection) Bucket() string    { return Bucket }
func (Projection) Filters() []string { return events.EventSubjects() }

// Apply folds one event into its aggregate's entry.
func (Projection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	t := events.Type(ev.Type())
	key := Key(t.Kind(), ev.Subject())
	var e Entry
	if _, err := s.Get(ctx, key, &e); err != nil {
		return err
	}
	ref := EventRef{ID: ev.ID(), Type: ev.Type(), Time: ev.Time().UTC()}
	if e.Count == 0 {
		e.ID, e.Kind, e.First = ev.Subject(), t.Kind(), ref
	}
	e.Count++
	e.Last = ref
	var data struct {
		Skill  string `json:"skill"`
		Driver string `json:"driver"`
		Step   string `json:"step"`
		RunID  string `json:"run_id"`
		Choice string `json:"choice"`
		Method string `json:"method"`
		Name   string `json:"name"`
	}
	var skillObj struct {
		Skill struct {
			Name string `json:"name"`
		} `json:"skill"`
	}
	_ = json.Unmarshal(ev.Data(), &data)
	if t == events.RunRequested {
		_ = json.Unmarshal(ev.Data(), &skillObj)
		data.Skill = skillObj.Skill.Name
	}
	if data.Skill != "" {
		e.Skill = data.Skill
	}
	if data.Driver != "" {
		e.Driver = data.Driver
	}
	if data.Step != "" && t.Kind() == "run" {
		e.Step = data.Step
	}
	if data.RunID != "" {
		e.RunID = data.RunID
	}
	if next := status(t, e.Status); next != "" {
		e.Status = next
	}
	if t == events.ConfirmAnswered {
		e.Choice, e.Method = data.Choice, data.Method
	}
	return s.Put(ctx, key, e)
}

// status is the state machine of the index's status field. Terminal states
// stay put: a late event does not revive a finished aggregate.
func status(t events.Type, cur string) string {
	switch cur {
	case "completed", "cancelled", "answered":
		return ""
	case "failed":
		// A failed run can be reopened by a retry.
		if t != events.RunResumed && t != events.RunStepStarted {
			return ""
		}
	case "forgotten":
		if t != events.PrefSet && t != events.FixLearned {
			return ""
		}
	}
	switch t {
	case events.RunRequested:
		return "requested"
	case events.RunStarted, events.RunResumed, events.RunStepStarted:
		return "running"
	case events.RunPaused:
		return "paused"
	case events.RunCompleted:
		return "completed"
	case events.RunFailed:
		return "failed"
	case events.RunCancelled:
		return "cancelled"
	case events.ConfirmRequested:
		return "pending"
	case events.ConfirmExpired:
		return "expired"
	case events.ConfirmAnswered:
		return "answered"
	case events.ConfirmDelegated:
		return "delegated"
	case events.PrefSet, events.FixLearned:
		return "active"
	case events.PrefForgotten, events.FixForgotten:
		return "forgotten"
	}
	if cur == "" {
		return "active"
	}
	return ""
}
