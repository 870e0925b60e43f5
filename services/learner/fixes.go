package learner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/heedhq/heed/events"
)

// FixesBucket holds learned fixes; keys are fix ids (events.FixID).
const FixesBucket = "heed_fixes"

// Confidence rules for learned fixes.
const (
	FixMinConfidence    = 0.3 // below this the healer does not use a fix
	personFixConfidence = 0.9
	agentFixConfidence  = 0.6
)

// Fix is a learned fix with how it has fared.
type Fix struct {
	ID           string            `json:"id"`
	Tool         string            `json:"tool"`
	ErrorPattern string            `json:"error_pattern"`
	Match        string            `json:"match,omitempty"`
	RootCause    string            `json:"root_cause,omitempty"`
	Description  string            `json:"description"`
	Action       *events.FixAction `json:"action,omitempty"`
	ArgsPatch    map[string]any    `json:"args_patch,omitempty"`
	WhenWas      map[string]any    `json:"when_was,omitempty"`
	Source       string            `json:"source"`
	By           string            `json:"by,omitempty"`
	LearnedFrom  string            `json:"learned_from,omitempty"`
	RunID        string            `json:"run_id,omitempty"`
	Confidence   float64           `json:"confidence"`
	Healed       int               `json:"healed"`
	Failed       int               `json:"failed"`
	LearnedAt    time.Time         `json:"learned_at"`
	LastUsed     time.Time         `json:"last_used,omitempty"`
}

// Usable reports whether the healer may apply the fix.
func (f Fix) Usable() bool { return f.Confidence >= FixMinConfidence }

// FixesProjection projects fix events and heal outcomes into FixesBucket.
type FixesProjection struct{}

func (FixesProjection) Name() string   { return "fixes" }
func (FixesProjection) Bucket() string { return FixesBucket }
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
		var f Fix
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
		f = Fix{ID: ev.Subject(), Tool: d.Tool, ErrorPattern: d.ErrorPattern, Match: d.Match, RootCause: d.RootCause,
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
		var f Fix
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
