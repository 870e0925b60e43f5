package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/runstate"
)

// runRow is one run in the list.
type runRow struct {
	ID, Skill, Status, Step string
	Events                  int
	Last                    time.Time
}

func rowOf(e readmodel.IndexEntry) runRow {
	return runRow{ID: e.ID, Skill: e.Skill, Status: e.Status, Step: e.Step, Events: e.Count, Last: e.Last.Time}
}

const runsShown = 200

func (s *Server) runsPage(w http.ResponseWriter, r *http.Request, sess *session) {
	// The live stream goes on from the log as it was before the index
	// was read: nothing stored meanwhile is missed, whenever the page
	// opens its stream (what the index had already is counted twice in
	// a row's events at worst).
	after, err := s.c.LastSeq(r.Context())
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	entries, err := s.c.Index(r.Context(), "run")
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	slices.SortFunc(entries, func(a, b readmodel.IndexEntry) int { return b.Last.Time.Compare(a.Last.Time) })
	rows := make([]runRow, 0, min(len(entries), runsShown))
	for _, e := range entries[:min(len(entries), runsShown)] {
		rows = append(rows, rowOf(e))
	}
	s.renderPage(w, "runs.html", "Runs", "runs", sess, map[string]any{"Runs": rows, "Total": len(entries), "After": after})
}

// runsEvents streams each run's row as its events are stored (an ordered
// consumer of heed.run.*.> after=SEQ, the log as the page read it, or
// from now; deleted when the page goes). A burst is sent at most every
// 100 ms per run.
func (s *Server) runsEvents(w http.ResponseWriter, r *http.Request, _ *session) {
	out, ok := startSSE(w)
	if !ok {
		return
	}
	ctx, stop := context.WithCancel(r.Context())
	type stored struct {
		seq uint64
		ev  *events.Event
	}
	msgs := make(chan stored, 4096)
	// Where to go on from: a reconnect says what it was sent last
	// (Last-Event-ID: the log position of the rows sent), a new page what
	// it read (?after=), else from now.
	after := heedclient.FromNow
	if v, err := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64); err == nil {
		after = v
	}
	if v, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil {
		after = v
	}
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		err := s.c.FollowNew(ctx, "heed.run.*.>", after, func(seq uint64, ev *events.Event) error {
			select {
			case msgs <- stored{seq, ev}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if ctx.Err() == nil {
			s.log.Warn("console: runs watch lost", "err", err)
			stop() // the browser's reconnect starts it again
		}
	}()
	defer func() { stop(); <-followed }()
	rows := map[string]*runRow{}
	dirty := map[string]bool{}
	var last uint64 // the log position of the last event folded into rows
	var mu sync.Mutex
	flush := time.NewTicker(100 * time.Millisecond)
	defer flush.Stop()
	ping := time.NewTicker(20 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if out.ping() != nil {
				return
			}
		case m := <-msgs:
			ev := m.ev
			mu.Lock()
			last = m.seq
			row := rows[ev.Subject()]
			if row == nil {
				row = &runRow{ID: ev.Subject()}
				if e, ok, err := s.c.IndexEntry(r.Context(), "run", ev.Subject()); err == nil && ok {
					*row = rowOf(e)
				}
				rows[ev.Subject()] = row
			}
			applyToRow(row, ev)
			dirty[row.ID] = true
			mu.Unlock()
		case <-flush.C:
			mu.Lock()
			for id := range dirty {
				if out.sendID("run", strconv.FormatUint(last, 10), map[string]string{"id": id, "html": s.fragment("runrow", *rows[id])}) != nil {
					mu.Unlock()
					return
				}
			}
			clear(dirty)
			mu.Unlock()
		}
	}
}

func applyToRow(row *runRow, ev *events.Event) {
	t := events.Type(ev.Type())
	if next := runstate.NextStatus(row.Status, t); next != "" {
		row.Status = next
	}
	var d struct {
		Step  string `json:"step"`
		Skill string `json:"skill"`
	}
	_ = json.Unmarshal(ev.Data(), &d)
	if d.Step != "" {
		row.Step = d.Step
	}
	if d.Skill != "" && row.Skill == "" {
		row.Skill = d.Skill
	}
	row.Events++
	row.Last = ev.Time()
}

// timelineRow is one event of a run's timeline.
type timelineRow struct {
	Seq     uint64
	Time    time.Time
	Type    string
	Subject string
	Summary string
	Raw     string
	Invalid string
}

func (s *Server) timelineRowOf(seq uint64, ev *events.Event) timelineRow {
	raw, _ := json.MarshalIndent(ev, "", "  ")
	return timelineRow{Seq: seq, Time: ev.Time(), Type: strings.TrimPrefix(ev.Type(), "heed."), Subject: ev.Subject(), Summary: summarize(ev), Raw: string(raw)}
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	if !events.ValidID(id) {
		http.Error(w, "not a run id", http.StatusBadRequest)
		return
	}
	run, err := s.c.Run(r.Context(), id)
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	msgs, err := s.c.History(r.Context(), events.SubjectFilter("run", id))
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	var rows []timelineRow
	confirms := map[string]bool{}
	for _, m := range msgs {
		if m.Event == nil {
			rows = append(rows, timelineRow{Seq: m.Seq, Subject: m.Raw.Subject, Invalid: fmt.Sprint(m.Err)})
			continue
		}
		rows = append(rows, s.timelineRowOf(m.Seq, m.Event))
		var d struct {
			ConfirmID string `json:"confirm_id"`
		}
		if json.Unmarshal(m.Event.Data(), &d) == nil && d.ConfirmID != "" {
			confirms[d.ConfirmID] = true
		}
	}
	for cid := range confirms {
		cm, err := s.c.History(r.Context(), events.SubjectFilter("confirm", cid))
		if err != nil {
			continue
		}
		for _, m := range cm {
			if m.Event != nil {
				rows = append(rows, s.timelineRowOf(m.Seq, m.Event))
			}
		}
	}
	slices.SortFunc(rows, func(a, b timelineRow) int { return int(a.Seq) - int(b.Seq) })
	// The live stream sends what comes after the run's history as read
	// (its confirmations were read later and may reach further: the
	// page drops a row it has).
	var after uint64
	if len(msgs) > 0 {
		after = msgs[len(msgs)-1].Seq
	}
	var failed []string
	for i, st := range run.Steps {
		if st.Status == runstate.StepFailed {
			failed = append(failed, run.Skill.Steps[i].Name)
		}
	}
	s.renderPage(w, "run.html", "Run "+id, "runs", sess, map[string]any{"Run": run, "Rows": rows, "Failed": failed,
		"Paused": run.Status == runstate.StatusPaused, "Terminal": run.Terminal(), "After": after})
}

// runEvents streams a run's events, and its confirmations', as timeline
// rows, as the log stores them (a publish the stream refused, or a
// duplicate it dropped, is never shown): after=SEQ leaves out what the
// page already shows. The run's history is read from its start to find
// its confirmations; each is followed on its own subjects.
func (s *Server) runEvents(w http.ResponseWriter, r *http.Request, _ *session) {
	id := r.PathValue("id")
	if !events.ValidID(id) {
		jsonError(w, http.StatusBadRequest, "not a run id")
		return
	}
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	out, ok := startSSE(w)
	if !ok {
		return
	}
	ctx, stop := context.WithCancel(r.Context())
	type stored struct {
		seq, shown uint64 // shown: the page has this follower's events up to here
		ev         *events.Event
	}
	rows := make(chan stored, 256)
	var wg sync.WaitGroup
	follow := func(filter string, shown uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.c.FollowStored(ctx, filter, 0, func(seq uint64, ev *events.Event) error {
				select {
				case rows <- stored{seq: seq, shown: shown, ev: ev}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			if ctx.Err() == nil {
				s.log.Warn("console: run timeline watch lost", "run", id, "filter", filter, "err", err)
				stop() // the browser's reconnect starts it again
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	follow(events.SubjectFilter("run", id), after)
	confirms := map[string]bool{}
	pump(ctx, out, rows, func(m stored, _ bool) error {
		kind := events.Type(m.ev.Type()).Kind()
		if kind == "run" {
			var d struct {
				ConfirmID string `json:"confirm_id"`
			}
			if json.Unmarshal(m.ev.Data(), &d) == nil && events.ValidID(d.ConfirmID) && !confirms[d.ConfirmID] {
				confirms[d.ConfirmID] = true
				// The page shows the confirmations it found in the run's
				// events it shows: those up to after; a later one is new.
				shown := after
				if m.seq > after {
					shown = 0
				}
				follow(events.SubjectFilter("confirm", d.ConfirmID), shown)
			}
		}
		if m.seq <= m.shown {
			return nil
		}
		status := ""
		if kind == "run" {
			status = runstate.NextStatus("", events.Type(m.ev.Type()))
		}
		return out.send("event", map[string]string{"id": m.ev.ID(), "html": s.fragment("timelinerow", s.timelineRowOf(m.seq, m.ev)), "status": status})
	})
}

type runActionRequest struct {
	Choice string         `json:"choice"`
	Reason string         `json:"reason"`
	Step   string         `json:"step"`
	Args   map[string]any `json:"args"`
}

// runAction continues, retries a step of, or cancels a run: for operators.
func (s *Server) runAction(w http.ResponseWriter, r *http.Request, sess *session) {
	if !sess.user.Operator {
		s.log.Warn("console: run action refused", "identity", sess.user.Identity, "action", r.PathValue("action"), "why", "not an operator")
		jsonError(w, http.StatusForbidden, "only operators may continue, retry or cancel runs (operator: true in the users file)")
		return
	}
	var req runActionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 256<<10)).Decode(&req); err != nil {
		jsonError(w, http.StatusBadRequest, "the request is not JSON: "+err.Error())
		return
	}
	id, by := r.PathValue("id"), sess.user.Identity
	var rep command.RunReply
	var err error
	switch r.PathValue("action") {
	case "continue":
		rep, err = s.c.Continue(r.Context(), command.ContinueRun{RunID: id, Choice: req.Choice, Reason: req.Reason, By: by})
	case "retry":
		rep, err = s.c.Retry(r.Context(), command.RetryStep{RunID: id, Step: req.Step, Args: req.Args, Reason: req.Reason, By: by})
	case "cancel":
		rep, err = s.c.Cancel(r.Context(), command.CancelRun{RunID: id, Reason: req.Reason, By: by})
	default:
		jsonError(w, http.StatusNotFound, "no such action: use continue, retry or cancel")
		return
	}
	if err != nil {
		jsonError(w, statusOf(err), events.Message(err))
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// summarize is an event's gist on one line.
func summarize(ev *events.Event) string {
	var d map[string]any
	if json.Unmarshal(ev.Data(), &d) != nil {
		return ""
	}
	var parts []string
	for _, k := range []string{"step", "tool", "kind", "choice", "method", "by", "channel", "reason", "message", "summary", "verdict", "item"} {
		if v, ok := d[k]; ok && v != nil && fmt.Sprint(v) != "" {
			parts = append(parts, fmt.Sprintf("%s: %v", k, v))
		}
	}
	if e, ok := d["error"].(map[string]any); ok {
		parts = append(parts, fmt.Sprintf("error: %v", e["message"]))
	}
	if o, ok := d["output"]; ok && o != nil {
		b, _ := json.Marshal(o)
		parts = append(parts, "output: "+truncate(string(b), 120))
	}
	return truncate(strings.Join(parts, " · "), 400)
}
