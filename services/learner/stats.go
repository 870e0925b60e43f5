package learner

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/heedhq/heed/events"
)

// StatsBucket holds failure and decision statistics.
const StatsBucket = "heed_stats"

// StatsKey is the key of the failure statistics.
const StatsKey = "failures"

// Period counts failures in a day or week.
type Period struct {
	Total     int `json:"total"`
	AutoFixed int `json:"auto_fixed"`
}

// FailureStats are the seed's tool_failures stats, over every run.
type FailureStats struct {
	TotalFailures  int               `json:"total_failures"`
	AutoFixed      int               `json:"auto_fixed"`      // healed by a learned or generic fix, no person
	AgentFixed     int               `json:"agent_fixed"`     // healed by the agent's corrected retry
	ManualRequired int               `json:"manual_required"` // handed to the agent
	GaveUp         int               `json:"gave_up"`
	FixesLearned   int               `json:"fixes_learned"`
	ByType         map[string]int    `json:"by_type"`
	Daily          map[string]Period `json:"daily"`
	Weekly         map[string]Period `json:"weekly"`
	Last           time.Time         `json:"last"`
}

// AutoHealRate is the share of failures healed without anyone.
func (s FailureStats) AutoHealRate() float64 {
	if s.TotalFailures == 0 {
		return 0
	}
	return float64(s.AutoFixed) / float64(s.TotalFailures)
}

// statsDays is how many days of daily figures are kept.
const statsDays = 90

// StatsProjection keeps FailureStats.
type StatsProjection struct{}

func (StatsProjection) Name() string   { return "stats" }
func (StatsProjection) Bucket() string { return StatsBucket }
func (StatsProjection) Filters() []string {
	return []string{"heed.run.*.step.failed", "heed.run.*.heal.>", "heed.fix.*.learned"}
}

// Apply counts one event.
func (StatsProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	var st FailureStats
	if _, err := s.Get(ctx, StatsKey, &st); err != nil {
		return err
	}
	if st.ByType == nil {
		st.ByType, st.Daily, st.Weekly = map[string]int{}, map[string]Period{}, map[string]Period{}
	}
	t := ev.Time().UTC()
	day := t.Format("2006-01-02")
	y, w := t.ISOWeek()
	week := fmt.Sprintf("%d-W%02d", y, w)
	bump := func(auto bool) {
		d, wk := st.Daily[day], st.Weekly[week]
		if auto {
			d.AutoFixed++
			wk.AutoFixed++
		} else {
			d.Total++
			wk.Total++
		}
		st.Daily[day], st.Weekly[week] = d, wk
	}
	switch events.Type(ev.Type()) {
	case events.RunStepFailed:
		st.TotalFailures++
		bump(false)
	case events.HealTriggered:
		var d events.HealTriggeredData
		if json.Unmarshal(ev.Data(), &d) == nil && d.HealAttempt <= 1 {
			st.ByType[d.Classification.Kind]++
		}
	case events.HealHealed:
		var d events.HealHealedData
		if json.Unmarshal(ev.Data(), &d) == nil {
			if d.Via == events.PlanAgent {
				st.AgentFixed++
			} else {
				st.AutoFixed++
				bump(true)
			}
		}
	case events.HealEscalated:
		st.ManualRequired++
	case events.HealGaveUp:
		st.GaveUp++
	case events.FixLearned:
		st.FixesLearned++
	default:
		return nil
	}
	if t.After(st.Last) {
		st.Last = t
	}
	prune(st.Daily, st.Last.AddDate(0, 0, -statsDays).Format("2006-01-02"))
	return s.Put(ctx, StatsKey, st)
}

func prune(m map[string]Period, before string) {
	for k := range m {
		if k < before {
			delete(m, k)
		}
	}
}

// SortedDays returns the daily figures in date order.
func (s FailureStats) SortedDays() []string {
	out := make([]string, 0, len(s.Daily))
	for k := range s.Daily {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
