package learner

import (
	"context"
	"fmt"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/skill"
)

// Confidence rules for learned fixes.
const (
	personFixConfidence = 0.9
	agentFixConfidence  = 0.6
)

// FixesProjection projects fix events and heal outcomes into FixesBucket.
type FixesProjection struct{}

func (FixesProjection) Name() string   { return "fixes" }
func (FixesProjection) Bucket() string { return readmodel.FixesBucket }
func (FixesProjection) Filters() []string {
	return []string{"heed.fix.>", "heed.run.*.heal.healed", "heed.run.*.heal.gave_up"}
}

// Apply learns, forgets and scores fixes.
func (FixesProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	return fixRoutes.Apply(ctx, s, ev)
}

var fixRoutes = func() *events.ProjectionRoutes {
	r := events.NewProjectionRoutes()
	events.Fold(r, events.FixLearned, func(ctx context.Context, s events.Store, ev *events.Event, d *events.FixLearnedData) error {
		// A fix that could never apply (published around the healer's
		// heed.cmd.fix.learn) is dead-lettered with the reason, not shown
		// as a known issue on every run; replay skips it the same way.
		if err := skill.CheckArgsPatch(d.ArgsPatch); err != nil {
			return events.Poison(fmt.Errorf("fix %s: %w", ev.Subject(), err))
		}
		var f readmodel.Fix
		if _, err := s.Get(ctx, ev.Subject(), &f); err != nil {
			return err
		}
		conf := d.Confidence
		if conf == 0 {
			conf = agentFixConfidence
			if d.Source == events.FixFromPerson {
				conf = personFixConfidence
			}
		}
		f = readmodel.Fix{ID: ev.Subject(), Tool: d.Tool, ErrorPattern: d.ErrorPattern, Match: d.Match, RootCause: d.RootCause,
			Description: d.Description, Action: d.Action, ArgsPatch: d.ArgsPatch, WhenWas: d.WhenWas, Source: d.Source,
			By: d.By, LearnedFrom: d.LearnedFrom, RunID: d.RunID, Confidence: conf, Healed: f.Healed, Failed: f.Failed,
			LearnedAt: ev.Time().UTC()}
		return s.Put(ctx, ev.Subject(), f)
	})
	events.Fold(r, events.FixForgotten, func(ctx context.Context, s events.Store, ev *events.Event, _ *events.FixForgottenData) error {
		return s.Delete(ctx, ev.Subject())
	})
	events.Fold(r, events.HealHealed, func(ctx context.Context, s events.Store, ev *events.Event, d *events.HealHealedData) error {
		return scoreFix(ctx, s, ev, d.FixID, true)
	})
	events.Fold(r, events.HealGaveUp, func(ctx context.Context, s events.Store, ev *events.Event, d *events.HealGaveUpData) error {
		return scoreFix(ctx, s, ev, d.FixID, false)
	})
	return r
}()

// scoreFix counts a learned fix's outcome: healing raises its confidence,
// failing halves it.
func scoreFix(ctx context.Context, s events.Store, ev *events.Event, fixID string, healed bool) error {
	if fixID == "" {
		return nil
	}
	var f readmodel.Fix
	ok, err := s.Get(ctx, fixID, &f)
	if err != nil || !ok {
		return err
	}
	f.LastUsed = ev.Time().UTC()
	if healed {
		f.Healed++
		f.Confidence = round3(f.Confidence + (1-f.Confidence)*0.3)
	} else {
		f.Failed++
		f.Confidence = round3(f.Confidence * 0.5)
	}
	return s.Put(ctx, fixID, f)
}

func round3(f float64) float64 { return float64(int(f*1000+0.5)) / 1000 }
