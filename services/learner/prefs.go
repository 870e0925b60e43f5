package learner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/heedhq/heed/events"
)

// PrefsBucket holds remembered choices; keys are preference ids.
const PrefsBucket = "heed_prefs"

// Pref is a remembered choice.
type Pref struct {
	ID           string    `json:"id"`
	Scope        string    `json:"scope"`
	Skill        string    `json:"skill,omitempty"`
	Step         string    `json:"step,omitempty"`
	Tool         string    `json:"tool,omitempty"`
	ErrorPattern string    `json:"error_pattern,omitempty"`
	Choice       string    `json:"choice"`
	By           string    `json:"by"`
	LearnedFrom  string    `json:"learned_from,omitempty"`
	ConfirmID    string    `json:"confirm_id,omitempty"`
	SetAt        time.Time `json:"set_at"`
}

// PrefsProjection projects preference events into PrefsBucket.
type PrefsProjection struct{}

func (PrefsProjection) Name() string      { return "prefs" }
func (PrefsProjection) Bucket() string    { return PrefsBucket }
func (PrefsProjection) Filters() []string { return []string{"heed.pref.>"} }

// Apply sets or forgets one preference.
func (PrefsProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	id := ev.Subject()
	switch events.Type(ev.Type()) {
	case events.PrefSet:
		var d events.PrefSetData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
		}
		return s.Put(ctx, id, Pref{ID: id, Scope: d.Scope, Skill: d.Skill, Step: d.Step, Tool: d.Tool, ErrorPattern: d.ErrorPattern,
			Choice: d.Choice, By: d.By, LearnedFrom: d.LearnedFrom, ConfirmID: d.ConfirmID, SetAt: ev.Time().UTC()})
	case events.PrefForgotten:
		return s.Delete(ctx, id)
	}
	return nil
}

// ReadPref reads a preference from the bucket as the router sees it.
func ReadPref(b []byte) (Pref, bool) {
	var env struct {
		Deleted bool `json:"deleted"`
		Value   Pref `json:"value"`
	}
	if json.Unmarshal(b, &env) != nil || env.Deleted {
		return Pref{}, false
	}
	return env.Value, true
}
