package escalator

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/escalation"
	"github.com/nats-io/nats.go/jetstream"
)

var jsonUnmarshal = json.Unmarshal

// heldIndex is the escalator's memory of held requests by session: the
// held command reads it without touching NATS. It is fed by what the
// escalator writes and by its projector (log order), and never takes back
// a decision it has seen.
type heldIndex struct {
	maxHeld int
	mu      sync.RWMutex
	bySess  map[string]map[string]command.HeldEscalation
	session map[string]string // escalation id → session
	// done are the escalations decided lately, in two generations swapped
	// every doneFor: what the projector (log order, behind what the
	// escalator wrote itself) still says of them must not bring them back.
	// A decision older than that is forgotten, so the index stays the size
	// of what is held; a projector later than that brings a decided request
	// back only until it reaches the decision itself.
	done, doneBefore map[string]bool
	doneSince        time.Time
	// progress of each held entry: a summary the projector writes late
	// (behind what the escalator wrote itself) does not take it back.
	progress map[string]int
}

// doneFor is how long a decided escalation is remembered (one generation).
const doneFor = 10 * time.Minute

// progressOf orders an escalation's states: routed, then each offer and
// escalation.
func progressOf(routed bool, escalations int, offerOpen bool) int {
	p := 10 * escalations
	if routed {
		p++
	}
	if offerOpen {
		p += 5
	}
	return p
}

func newHeldIndex(maxHeld int) *heldIndex {
	return &heldIndex{maxHeld: maxHeld, bySess: map[string]map[string]command.HeldEscalation{}, session: map[string]string{},
		done: map[string]bool{}, doneBefore: map[string]bool{}, doneSince: time.Now(), progress: map[string]int{}}
}

// load starts the index from the projection's summaries.
func (h *heldIndex) load(ctx context.Context, js jetstream.JetStream) error {
	kv, err := events.BindBucket(ctx, js, readmodel.EscalationsBucket)
	if err != nil {
		return &events.Error{Code: events.CodeUnavailable, Message: "bucket " + readmodel.EscalationsBucket + ": " + err.Error(), Err: err}
	}
	// Read whole before any is applied: a try cut short by NATS is read
	// again from the start. A held escalation left out would never be
	// resumed at start.
	var summaries []readmodel.Escalation
	err = events.WhileUnavailable(ctx, func() error {
		summaries = summaries[:0]
		return events.ScanBucket(ctx, kv, "esc.>", func(_ string, value []byte) error {
			var s readmodel.Escalation
			if readmodel.Decode(value, &s) {
				summaries = append(summaries, s)
			}
			return nil
		})
	})
	if err != nil {
		return &events.Error{Code: events.CodeUnavailable, Message: "read " + readmodel.EscalationsBucket + ": " + err.Error(), Err: err}
	}
	for _, s := range summaries {
		h.apply(s)
	}
	return nil
}

// apply takes a summary (from the projection).
func (h *heldIndex) apply(s readmodel.Escalation) {
	h.put(s.ID, s.Session, s.Status == events.EscalationHeld, progressOf(s.Route != "", s.EscalationCount, s.ConfirmID != ""), command.HeldEscalation{ID: s.ID, Operation: s.Operation, Scope: s.Scope, Risk: s.Risk,
		Critical: s.Critical, Tier: s.Tier, Priority: s.Priority, Since: s.RequestedAt})
}

// set takes a state the escalator just wrote.
func (h *heldIndex) set(st *command.EscalationState) {
	if st.Decided == nil && st.Routed == nil {
		return // not routed yet: nothing to say
	}
	he := command.HeldEscalation{ID: st.ID, Operation: st.Request.Operation, Scope: st.Request.Scope, Since: st.RequestedAt}
	if r := st.Routed; r != nil {
		he.Risk, he.Critical, he.Priority, he.Tier = r.Risk, r.Critical, r.Priority, r.Tier
	}
	if o := escalation.CurrentOffer(st); o != nil {
		he.Tier = o.Tier
	}
	if n := len(st.Escalations); n > 0 && st.Escalations[n-1].ToTier != "" {
		he.Tier = st.Escalations[n-1].ToTier
	}
	o := escalation.CurrentOffer(st)
	h.put(st.ID, st.Request.Session, st.Decided == nil, progressOf(st.Routed != nil, len(st.Escalations), o != nil && o.EscalationCount == len(st.Escalations)), he)
}

func (h *heldIndex) put(id, session string, held bool, progress int, he command.HeldEscalation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done[id] || h.doneBefore[id] {
		return
	}
	if p, ok := h.progress[id]; held && ok && progress < p {
		return
	}
	if !held {
		if s, ok := h.session[id]; ok {
			delete(h.bySess[s], id)
			if len(h.bySess[s]) == 0 {
				delete(h.bySess, s)
			}
			delete(h.session, id)
		}
		delete(h.progress, id)
		if time.Since(h.doneSince) > doneFor {
			h.done, h.doneBefore, h.doneSince = map[string]bool{}, h.done, time.Now()
		}
		h.done[id] = true
		return
	}
	m := h.bySess[session]
	if m == nil {
		m = map[string]command.HeldEscalation{}
		h.bySess[session] = m
	}
	m[id] = he
	h.session[id] = session
	h.progress[id] = progress
}

// ids are the held escalations, sorted.
func (h *heldIndex) ids() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]string, 0, len(h.session))
	for id := range h.session {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func (h *heldIndex) count() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.session)
}

// query answers the held command: one session, or every session with
// held requests.
func (h *heldIndex) query(session string) command.HeldReply {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if session != "" {
		return command.HeldReply{SessionHeld: h.sessionHeld(session, command.HeldRequestsLimit)}
	}
	r := command.HeldReply{SessionHeld: command.SessionHeld{CanContinue: true, Requests: []command.HeldEscalation{}}}
	for s := range h.bySess {
		sh := h.sessionHeld(s, 0)
		r.Held += sh.Held
		r.Critical += sh.Critical
		r.Sessions = append(r.Sessions, sh)
	}
	// Those that hold most first: they are what an operator looks for.
	sort.Slice(r.Sessions, func(i, j int) bool {
		a, b := r.Sessions[i], r.Sessions[j]
		if a.Held != b.Held {
			return a.Held > b.Held
		}
		return a.Session < b.Session
	})
	if n := len(r.Sessions); n > command.HeldSessionsLimit {
		r.Sessions, r.MoreSessions = r.Sessions[:command.HeldSessionsLimit], n-command.HeldSessionsLimit
	}
	return r
}

// sessionHeld applies the seed's session rule: any critical held, or more
// than max_held held, and the session may not start new risky work.
func (h *heldIndex) sessionHeld(session string, limit int) command.SessionHeld {
	out := command.SessionHeld{Session: session, Requests: []command.HeldEscalation{}}
	crit := map[string]bool{}
	for _, he := range h.bySess[session] {
		out.Held++
		if he.Critical {
			out.Critical++
			crit[he.Operation] = true
		}
		if limit > 0 {
			out.Requests = append(out.Requests, he)
		}
	}
	sort.Slice(out.Requests, func(i, j int) bool {
		a, b := out.Requests[i], out.Requests[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.Before(b.Since)
		}
		return a.ID < b.ID
	})
	if len(out.Requests) > limit {
		out.Requests = out.Requests[:limit]
	}
	out.More = out.Held - len(out.Requests)
	switch {
	case out.Critical > 0:
		ops := make([]string, 0, len(crit))
		for op := range crit {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		if len(ops) > 5 {
			ops = append(ops[:5], fmt.Sprintf("%d more", len(ops)-5))
		}
		out.Reason = fmt.Sprintf("%d critical request(s) held (%s)", out.Critical, strings.Join(ops, ", "))
	case out.Held > h.maxHeld:
		out.Reason = fmt.Sprintf("%d requests held (more than %d)", out.Held, h.maxHeld)
	default:
		out.CanContinue = true
		out.Reason = fmt.Sprintf("%d requests held (at most %d, none critical)", out.Held, h.maxHeld)
	}
	return out
}
