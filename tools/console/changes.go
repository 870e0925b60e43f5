package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/changeset"
)

// mayReview says whether a person may decide a set: anyone when it names
// no reviewers, else one of them.
func mayReview(st *command.ChangeSetState, who string) bool {
	return len(st.Proposal.Reviewers) == 0 || slices.Contains(st.Proposal.Reviewers, who)
}

// setView is a set as the card and the detail show it.
type setView struct {
	*command.ChangeSetState
	Pending int
	Groups  []itemGroup
	MayDo   bool
	Expires string
}

type itemGroup struct {
	Name  string
	Items []itemView
}

type itemView struct {
	command.ChangeItemState
	SetID   string
	Preview []changeset.Change
	Open    bool
}

func viewOf(st *command.ChangeSetState, who string) setView {
	v := setView{ChangeSetState: st, Pending: len(changeset.Pending(st)), MayDo: mayReview(st, who) && changeset.Open(st)}
	if changeset.Open(st) {
		v.Expires = longDuration(time.Until(st.Proposal.ExpiresAt))
	}
	for _, it := range st.Items {
		iv := itemView{ChangeItemState: it, SetID: st.ID, Open: it.Status == events.ItemPending && v.MayDo, Preview: changeset.Preview(&it)}
		if n := len(v.Groups); n == 0 || v.Groups[n-1].Name != it.Group {
			v.Groups = append(v.Groups, itemGroup{Name: it.Group})
		}
		g := &v.Groups[len(v.Groups)-1]
		g.Items = append(g.Items, iv)
	}
	return v
}

func (s *Server) changesPage(w http.ResponseWriter, r *http.Request, sess *session) {
	all := r.URL.Query().Get("all") == "1"
	rep, err := s.c.ChangeSets(r.Context(), command.ListChangeSets{All: all, Limit: 200, After: r.URL.Query().Get("after")})
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	var views []setView
	for i := range rep.Sets {
		st := &rep.Sets[i]
		if mayReview(st, sess.user.Identity) || all {
			views = append(views, viewOf(st, sess.user.Identity))
		}
	}
	s.renderPage(w, "changes.html", "Change sets", "changes", sess, map[string]any{"Sets": views, "All": all, "More": rep.More, "Next": rep.Next})
}

func (s *Server) changeSetPage(w http.ResponseWriter, r *http.Request, sess *session) {
	st, err := s.c.ChangeSet(r.Context(), r.PathValue("id"))
	if err != nil {
		http.Error(w, events.Message(err), statusOf(err))
		return
	}
	s.renderPage(w, "changeset.html", "Change set "+st.ID, "changes", sess, viewOf(&st, sess.user.Identity))
}

// changeSetEvents sends the set's card again whenever anything happens
// to it (a decision from any channel, a result).
func (s *Server) changeSetEvents(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	if !events.ValidID(id) {
		jsonError(w, http.StatusBadRequest, "not a change set id")
		return
	}
	out, ok := startSSE(w)
	if !ok {
		return
	}
	st, err := s.c.ChangeSet(r.Context(), id)
	if err != nil {
		return
	}
	send := func(st *command.ChangeSetState) error {
		return out.send("card", map[string]string{"html": s.fragment("setdetail", viewOf(st, sess.user.Identity))})
	}
	if send(&st) != nil {
		return
	}
	// The set as the log stored it, after every change (a redraw on a
	// published message could read the set before the store and miss the
	// last change); the newest state waits in changed.
	changed := make(chan *command.ChangeSetState, 1)
	ctx, stop := context.WithCancel(r.Context())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		err := s.c.WatchChangeSet(ctx, id, func(now *command.ChangeSetState) error {
			select {
			case <-changed:
			default:
			}
			changed <- now
			return nil
		})
		if ctx.Err() == nil {
			// The watch is lost: end the stream, and the browser's
			// reconnect reads the set again.
			s.log.Warn("console: change set watch lost", "changeset", id, "err", err)
			stop()
		}
	}()
	defer func() { stop(); <-watchDone }()
	shown := st.Seq
	pump(ctx, out, changed, func(now *command.ChangeSetState, _ bool) error {
		if now.Seq <= shown {
			return nil // what the first card showed
		}
		shown = now.Seq
		return send(now)
	})
}

type decideRequest struct {
	Items   []int  `json:"items"`
	All     bool   `json:"all"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	var req decideRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		jsonError(w, http.StatusBadRequest, "the decision is not JSON: "+err.Error())
		return
	}
	st, err := s.c.ChangeSet(r.Context(), id)
	if err != nil {
		jsonError(w, statusOf(err), events.Message(err))
		return
	}
	if !mayReview(&st, sess.user.Identity) {
		s.log.Warn("console: decision refused", "identity", sess.user.Identity, "changeset", id, "why", "not a reviewer")
		jsonError(w, http.StatusForbidden, fmt.Sprintf("you may not decide this change set: its reviewers are %s", strings.Join(st.Proposal.Reviewers, ", ")))
		return
	}
	rep, err := s.c.DecideChanges(r.Context(), command.DecideChangeSet{ID: id, Items: req.Items, All: req.All, Verdict: req.Verdict, Reason: truncate(strings.TrimSpace(req.Reason), 4000), By: sess.user.Identity, Channel: Channel})
	if err != nil {
		jsonError(w, statusOf(err), events.Message(err))
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// longDuration reads as people say it: 6d 23h, 4h 05m, 12m.
func longDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0m"
	case d >= 48*time.Hour:
		d = d.Round(time.Hour)
		return fmt.Sprintf("%dd %02dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh %02dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	return fmt.Sprintf("%dm", int(d.Round(time.Minute)/time.Minute))
}
