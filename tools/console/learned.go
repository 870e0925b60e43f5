package console

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
)

func (s *Server) learnedPage(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx := r.Context()
	prefs, err := s.c.Prefs(ctx)
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	fixes, err := s.c.Fixes(ctx)
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	patterns, err := s.c.Patterns(ctx)
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	s.renderPage(w, "learned.html", "Learned", "learned", sess, map[string]any{"Prefs": prefs, "Fixes": fixes, "Patterns": patterns, "Operator": sess.user.Operator})
}

// forget revokes a remembered choice or a learned fix: for operators.
func (s *Server) forget(w http.ResponseWriter, r *http.Request, sess *session) {
	if !sess.user.Operator {
		jsonError(w, http.StatusForbidden, "only operators may forget learned state (operator: true in the users file)")
		return
	}
	ctx, id, by := r.Context(), r.PathValue("id"), sess.user.Identity
	if !events.ValidID(id) {
		jsonError(w, http.StatusBadRequest, "not an id")
		return
	}
	switch r.PathValue("kind") {
	case "fix":
		rep, err := s.c.ForgetFix(ctx, command.ForgetFix{ID: id, By: by, Reason: "forgotten in the console"})
		if err != nil {
			jsonError(w, statusOf(err), events.Message(err))
			return
		}
		writeJSON(w, http.StatusOK, rep)
	case "pref":
		p, ok, err := s.c.Pref(ctx, id)
		if err != nil {
			jsonError(w, statusOf(err), events.Message(err))
			return
		}
		if !ok {
			jsonError(w, http.StatusNotFound, "no remembered choice "+id)
			return
		}
		ev, err := events.NewEvent(events.PrefForgotten, id, fmt.Sprintf("%s/forget/%s", id, p.LearnedFrom), "heed/console", events.PrefForgottenData{By: by, Reason: "forgotten in the console"})
		if err == nil {
			_, err = s.c.Bus().Publish(ctx, &ev)
		}
		if err != nil {
			jsonError(w, statusOf(err), events.Message(err))
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"id": id, "event_id": ev.ID()})
	default:
		jsonError(w, http.StatusNotFound, "forget a pref or a fix")
	}
}

// chart is an SVG drawn on the server: no script, readable without one.
type chart struct {
	Title string
	Desc  string
	SVG   template.HTML
}

func (s *Server) statsPage(w http.ResponseWriter, r *http.Request, sess *session) {
	ctx := r.Context()
	st, err := s.c.Stats(ctx)
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	est, err := s.c.EscalationStats(ctx)
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	changes, err := s.c.ChangeStats(ctx)
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	confirms, err := s.c.Index(ctx, "confirm")
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	var charts []chart
	days := st.SortedDays()
	if len(days) > 30 {
		days = days[len(days)-30:]
	}
	var rates []point
	for _, d := range days {
		p := st.Daily[d]
		if p.Total > 0 {
			rates = append(rates, point{d, 100 * float64(p.AutoFixed) / float64(p.Total)})
		}
	}
	charts = append(charts, chart{Title: "Fix rate over time", Desc: fmt.Sprintf("failures healed without a person, per day (overall %.0f%% of %d)", 100*st.AutoHealRate(), st.TotalFailures), SVG: bars(rates, "%", 100)})
	var edays []string
	for d := range est.Daily {
		edays = append(edays, d)
	}
	sort.Strings(edays)
	if len(edays) > 30 {
		edays = edays[len(edays)-30:]
	}
	var avoided []point
	for _, d := range edays {
		avoided = append(avoided, point{d, float64(est.Daily[d].Avoided)})
	}
	charts = append(charts, chart{Title: "Escalations avoided", Desc: fmt.Sprintf("decided without a person, per day (%d of %d requests, %.0f%% of decisions)", est.Avoided, est.Requested, 100*est.AvoidedShare()), SVG: bars(avoided, "", 0)})
	charts = append(charts, chart{Title: "Answer latency", Desc: "time from a question to the answer that took effect, people's answers (the last 1,000)", SVG: latencyChart(confirms)})
	var tools []changeRow
	for _, a := range changes {
		for t, d := range a.Tools {
			tools = append(tools, changeRow{Agent: a.Agent, Tool: t, ToolDecisions: d, Keeps: d.KeepsProposingRejected()})
		}
	}
	slices.SortFunc(tools, func(a, b changeRow) int { return strings.Compare(a.Agent+a.Tool, b.Agent+b.Tool) })
	s.renderPage(w, "stats.html", "Statistics", "stats", sess, map[string]any{"Charts": charts, "Failures": st, "Escalations": est, "Changes": tools})
}

type changeRow struct {
	Agent, Tool string
	readmodel.ToolDecisions
	Keeps bool
}

type point struct {
	Label string
	Value float64
}

// bars draws a bar chart of points (max: the scale's top; 0: the largest
// value). An empty series says so.
func bars(ps []point, unit string, top float64) template.HTML {
	const w, h, pad = 320.0, 110.0, 22.0
	if len(ps) == 0 {
		return template.HTML(`<p class="empty">no data yet</p>`)
	}
	if top <= 0 {
		for _, p := range ps {
			top = math.Max(top, p.Value)
		}
		top = math.Max(top, 1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %.0f %.0f" role="img" class="chart"><g class="axis"><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f"/></g>`, w, h+pad, pad, h, w, h)
	bw := (w - pad) / float64(len(ps))
	for i, p := range ps {
		bh := (h - 10) * p.Value / top
		x := pad + float64(i)*bw
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %.1f%s</title></rect>`, x+2, h-bh, math.Max(bw-4, 1), bh, template.HTMLEscapeString(p.Label), p.Value, unit)
		if len(ps) <= 12 || i%(len(ps)/6+1) == 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f">%s</text>`, x+2, h+14, template.HTMLEscapeString(shortDay(p.Label)))
		}
	}
	fmt.Fprintf(&b, `<text x="0" y="10">%.0f%s</text></svg>`, top, unit)
	return template.HTML(b.String())
}

func shortDay(d string) string {
	if t, err := time.Parse("2006-01-02", d); err == nil {
		return t.Format("Jan 2")
	}
	return d
}

// latencyChart is a histogram of how long people took to answer.
func latencyChart(confirms []readmodel.IndexEntry) template.HTML {
	slices.SortFunc(confirms, func(a, b readmodel.IndexEntry) int { return b.Last.Time.Compare(a.Last.Time) })
	buckets := []struct {
		label string
		upTo  time.Duration
	}{{"< 5s", 5 * time.Second}, {"< 30s", 30 * time.Second}, {"< 1m", time.Minute}, {"< 5m", 5 * time.Minute}, {"< 30m", 30 * time.Minute}, {"≥ 30m", math.MaxInt64}}
	counts := make([]float64, len(buckets))
	n := 0
	for _, e := range confirms {
		if e.Status != readmodel.StatusAnswered || e.Method != events.MethodUser || n >= 1000 {
			continue
		}
		n++
		d := e.Last.Time.Sub(e.First.Time)
		for i, b := range buckets {
			if d < b.upTo {
				counts[i]++
				break
			}
		}
	}
	if n == 0 {
		return template.HTML(`<p class="empty">no answers by people yet</p>`)
	}
	ps := make([]point, len(buckets))
	for i, b := range buckets {
		ps[i] = point{b.label, counts[i]}
	}
	return bars(ps, "", 0)
}
