package learner

import (
	"context"
	"encoding/json"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
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
	switch events.Type(ev.Type()) {
	case events.FixLearned:
		var d events.FixLearnedData
		if err := json.Unmarshal(ev.Data(), &d); err != nil {
			return events.Poison(err)
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
	case events.FixForgotten:
		return s.Delete(ctx, ev.Subject())
	case events.HealHealed, events.HealGaveUp:
		var d struct {
			FixID string `json:"fix_id"`
		}
		if err := json.Unmarshal(ev.Data(), &d); err != nil || d.FixID == "" {
			return nil
		}
		var f readmodel.Fix
		ok, err := s.Get(ctx, d.FixID, &f)
		if err != nil || !ok {
			return err
		}
		f.LastUsed = ev.Time().UTC()
		if events.Type(ev.Type()) == events.HealHealed {
			f.Healed++
			f.Confidence = round3(f.Confidence + (1-f.Confidence)*0.3)
		} else {
			f.Failed++
			f.Confidence = round3(f.Confidence * 0.5)
		}
		return s.Put(ctx, d.FixID, f)
	}
	return nil
}

func round3(f float64) float64 { return float64(int(f*1000+0.5)) / 1000 }
