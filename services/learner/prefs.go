package learner

import (
	"context"

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
	return prefRoutes.Apply(ctx, s, ev)
}

var prefRoutes = func() *events.ProjectionRoutes {
	r := events.NewProjectionRoutes()
	events.Fold(r, events.PrefSet, func(ctx context.Context, s events.Store, ev *events.Event, d *events.PrefSetData) error {
		id := ev.Subject()
		return s.Put(ctx, id, readmodel.Pref{ID: id, Scope: d.Scope, Skill: d.Skill, Step: d.Step, Tool: d.Tool, ErrorPattern: d.ErrorPattern,
			Choice: d.Choice, By: d.By, LearnedFrom: d.LearnedFrom, ConfirmID: d.ConfirmID, SetAt: ev.Time().UTC()})
	})
	events.Fold(r, events.PrefForgotten, func(ctx context.Context, s events.Store, ev *events.Event, _ *events.PrefForgottenData) error {
		return s.Delete(ctx, ev.Subject())
	})
	return r
}()
