package learner

import (
	"context"
	"encoding/json"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// PrefsProjection projects preference events into PrefsBucket.
type PrefsProjection struct{}

func (PrefsProjection) Name() string      { return "prefs" }
func (PrefsProjection) Bucket() string    { return readmodel.PrefsBucket }
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
		return s.Put(ctx, id, readmodel.Pref{ID: id, Scope: d.Scope, Skill: d.Skill, Step: d.Step, Tool: d.Tool, ErrorPattern: d.ErrorPattern,
			Choice: d.Choice, By: d.By, LearnedFrom: d.LearnedFrom, ConfirmID: d.ConfirmID, SetAt: ev.Time().UTC()})
	case events.PrefForgotten:
		return s.Delete(ctx, id)
	}
	return nil
}
