package learner

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/heedhq/heed/lib/skill"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// statsDays is how many days of daily figures are kept.
const statsDays = 90

// statsWeeks is how many weeks of weekly figures are kept.
const statsWeeks = 104

// maxFailureKinds bounds the failure kinds counted apart (by_type); the
// rest count as OtherKind. The healer's kinds are a handful, but a
// heal.triggered in the log may name any: unbounded, one agent's flood of
// made-up kinds grew the stats value past a NATS message, and every later
// write of it failed.
const maxFailureKinds = 32

// OtherKind counts the failure kinds past maxFailureKinds.
const OtherKind = "other"

// StatsProjection keeps readmodel.FailureStats.
type StatsProjection struct{}

func (StatsProjection) Name() string   { return "stats" }
func (StatsProjection) Bucket() string { return readmodel.StatsBucket }
func (StatsProjection) Filters() []string {
	return []string{"heed.run.*.step.failed", "heed.run.*.heal.>", "heed.fix.*.learned",
		"heed.escalation.*.requested", "heed.escalation.*.routed", "heed.escalation.*.escalated", "heed.escalation.*.decided", "heed.escalation.*.outcome"}
}

// Apply counts one event.
func (StatsProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	if strings.HasPrefix(ev.Type(), "heed.escalation.") {
		return escalationStats(ctx, s, ev)
	}
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
			kind := d.Classification.Kind
			if _, known := st.ByType[kind]; !known && len(st.ByType) >= maxFailureKinds {
				kind = OtherKind
			}
			st.ByType[kind]++
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
		var d events.FixLearnedData
		if json.Unmarshal(ev.Data(), &d) != nil || skill.CheckArgsPatch(d.ArgsPatch) != nil {
			return nil // refused by the fixes projection: not learned
		}
		st.FixesLearned++
	default:
		return nil
	}
	if t.After(st.Last) {
		st.Last = t
	}
	prune(st.Daily, st.Last.AddDate(0, 0, -statsDays).Format("2006-01-02"))
	// Weeks as their keys sort ("2026-W48"): one whose year and week come
	// before the kept weeks' first goes (a backdated event's week, too).
	y0, w0 := st.Last.AddDate(0, 0, -7*statsWeeks).ISOWeek()
	prune(st.Weekly, fmt.Sprintf("%d-W%02d", y0, w0))
	return s.Put(ctx, readmodel.StatsKey, st)
}

func prune(m map[string]readmodel.Period, before string) {
	for k := range m {
		if k < before {
			delete(m, k)
		}
	}
}

// escalationStats counts one escalation event into
// readmodel.EscalationStats (each event once: the escalator's ids are
// deterministic and JetStream drops a duplicate).
func escalationStats(ctx context.Context, s events.Store, ev *events.Event) error {
	var st readmodel.EscalationStats
	if _, err := s.Get(ctx, readmodel.EscalationStatsKey, &st); err != nil {
		return err
	}
	if st.Routed == nil {
		st.Routed, st.Decided, st.Escalated = map[string]int{}, map[string]int{}, map[string]int{}
	}
	if st.Daily == nil {
		st.Daily = map[string]readmodel.EscalationPeriod{}
	}
	t := ev.Time().UTC()
	day := t.Format("2006-01-02")
	p := st.Daily[day]
	switch events.Type(ev.Type()) {
	case events.EscalationRequested:
		st.Requested++
		p.Requested++
	case events.EscalationRouted:
		var d events.EscalationRoutedData
		if json.Unmarshal(ev.Data(), &d) != nil || d.Decision == "" {
			return nil
		}
		st.Routed[d.Decision]++
	case events.EscalationEscalated:
		var d events.EscalationEscalatedData
		if json.Unmarshal(ev.Data(), &d) != nil || d.Reason == "" {
			return nil
		}
		st.Escalated[d.Reason]++
	case events.EscalationDecided:
		var d events.EscalationDecidedData
		if json.Unmarshal(ev.Data(), &d) != nil || d.Method == "" {
			return nil
		}
		st.Decided[d.Method]++
		p.Decided++
		if d.Decision == events.EscalationApproved {
			st.Approved++
		} else {
			st.Denied++
		}
		// Avoided: nobody was asked (a rule, a conditional rule, the cache);
		// the final action is not avoided: people were asked and nobody
		// answered.
		if d.Method == events.EscMethodRule || d.Method == events.EscMethodCache {
			st.Avoided++
			p.Avoided++
		}
	case events.EscalationOutcome:
		var d events.EscalationOutcomeData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return nil
		}
		if d.Outcome == events.OutcomeFailure {
			st.Failures++
		} else {
			st.Successes++
		}
	default:
		return nil
	}
	st.Daily[day] = p
	if t.After(st.Last) {
		st.Last = t
	}
	for k := range st.Daily {
		if k < st.Last.AddDate(0, 0, -statsDays).Format("2006-01-02") {
			delete(st.Daily, k)
		}
	}
	return s.Put(ctx, readmodel.EscalationStatsKey, st)
}
