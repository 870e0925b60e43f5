package learner

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// statsDays is how many days of daily figures are kept.
const statsDays = 90

// StatsProjection keeps readmodel.FailureStats.
type StatsProjection struct{}

func (StatsProjection) Name() string   { return "stats" }
func (StatsProjection) Bucket() string { return readmodel.StatsBucket }
func (StatsProjection) Filters() []string {
	return []string{"heed.run.*.step.failed", "heed.run.*.heal.>", "heed.fix.*.learned"}
}

// Apply counts one event.
func (StatsProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	var st readmodel.FailureStats
	if _, err := s.Get(ctx, readmodel.StatsKey, &st); err != nil {
		return err
	}
	if st.ByType == nil {
		st.ByType, st.Daily, st.Weekly = map[string]int{}, map[string]readmodel.Period{}, map[string]readmodel.Period{}
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
	return s.Put(ctx, readmodel.StatsKey, st)
}

func prune(m map[string]readmodel.Period, before string) {
	for k := range m {
		if k < before {
			delete(m, k)
		}
	}
}
