package console

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/tools/bridge"
)

// hub is one person's inbox: the requests they may answer, from the
// bridges' watch (bridge.Watch: what their identity may answer, on
// channel web), shared by all their open pages. It stops when nobody
// has looked for a while.
type hub struct {
	identity string
	mu       sync.Mutex
	offers   map[string]bridge.Offer
	closed   map[string]string // recently closed: id → who answered
	subs     map[chan hubEvent]struct{}
	idle     time.Time
	cancel   context.CancelFunc
	// seq numbers the changes; recent keeps the last of them, so that a
	// page rendered at seq N is sent only what changed after N when its
	// stream connects.
	seq    uint64
	recent []hubEvent
}

type hubEvent struct {
	Seq    uint64
	Offer  *bridge.Offer
	Closed string // the offer's id
	Text   string // "Approve by user:bob via slack"
	Mine   bool   // the person of this inbox answered it
}

// hubIdle is how long a person's inbox watch outlives their last page.
const hubIdle = 10 * time.Minute

// hub returns the person's inbox, starting it if needed.
func (s *Server) hub(identity string) *hub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.hubs[identity]; h != nil {
		return h
	}
	ctx, cancel := context.WithCancel(s.ctx)
	h := &hub{identity: identity, offers: map[string]bridge.Offer{}, closed: map[string]string{}, subs: map[chan hubEvent]struct{}{}, idle: time.Now(), cancel: cancel}
	s.hubs[identity] = h
	go s.runHub(ctx, h)
	return h
}

func (s *Server) runHub(ctx context.Context, h *hub) {
	defer func() {
		s.mu.Lock()
		if s.hubs[h.identity] == h {
			delete(s.hubs, h.identity)
		}
		s.mu.Unlock()
		h.cancel()
	}()
	updates, err := bridge.Watch(ctx, s.c, h.identity, s.cfg.Routing)
	if err != nil {
		s.log.Warn("console: inbox watch", "identity", h.identity, "err", err)
		return
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return
			}
			h.apply(u)
		case <-tick.C:
			h.mu.Lock()
			idle := len(h.subs) == 0 && time.Since(h.idle) > hubIdle
			h.mu.Unlock()
			if idle {
				return
			}
		}
	}
}

func (h *hub) apply(u bridge.Update) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ev hubEvent
	if u.Closed {
		o, ok := h.offers[u.Offer.ID]
		if !ok {
			o = u.Offer
		}
		delete(h.offers, u.Offer.ID)
		text, mine := "answered", false
		if u.Winner != nil {
			text, mine = answeredText(*u.Winner, o), u.Winner.By == h.identity
		}
		h.closed[u.Offer.ID] = text
		if len(h.closed) > 4096 {
			clear(h.closed)
		}
		ev = hubEvent{Closed: u.Offer.ID, Text: text, Mine: mine}
	} else {
		o := u.Offer
		h.offers[o.ID] = o
		ev = hubEvent{Offer: &o}
	}
	h.seq++
	ev.Seq = h.seq
	h.recent = append(h.recent, ev)
	if len(h.recent) > recentChanges {
		h.recent = append([]hubEvent(nil), h.recent[len(h.recent)-recentChanges/2:]...)
	}
	for ch := range h.subs {
		select {
		case ch <- ev:
		default: // a page that cannot keep up reloads (its stream is closed)
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// recentChanges bounds the changes a hub keeps for streams that connect.
const recentChanges = 4096

// snapshot is the inbox now, most urgent first: critical risk first, then
// the nearest deadline, then the newest; seq is the last change in it.
func (h *hub) snapshot() (offers []bridge.Offer, seq uint64) {
	h.mu.Lock()
	out := make([]bridge.Offer, 0, len(h.offers))
	for _, o := range h.offers {
		out = append(out, o)
	}
	seq = h.seq
	h.mu.Unlock()
	slices.SortFunc(out, urgency)
	return out, seq
}

// since returns the changes after seq, and false when they are no longer
// all kept (the stream then sends the whole inbox).
func (h *hub) since(seq uint64) ([]hubEvent, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq > h.seq || len(h.recent) > 0 && h.recent[0].Seq > seq+1 || len(h.recent) == 0 && seq != h.seq {
		return nil, false
	}
	var out []hubEvent
	for _, ev := range h.recent {
		if ev.Seq > seq {
			out = append(out, ev)
		}
	}
	return out, true
}

func urgency(a, b bridge.Offer) int {
	ra, rb := risk(a), risk(b)
	if ca, cb := ra > events.CriticalRisk, rb > events.CriticalRisk; ca != cb {
		if ca {
			return -1
		}
		return 1
	}
	da, db := a.Deadline, b.Deadline
	switch {
	case da.IsZero() != db.IsZero():
		if da.IsZero() {
			return 1
		}
		return -1
	case !da.Equal(db):
		return da.Compare(db)
	}
	if ra != rb {
		return cmp.Compare(rb, ra)
	}
	return cmp.Compare(b.ID, a.ID)
}

func risk(o bridge.Offer) float64 {
	if o.Risk == nil {
		return 0
	}
	return *o.Risk
}

// subscribe delivers what changes from now on; the returned func ends it.
func (h *hub) subscribe() (<-chan hubEvent, func()) {
	ch := make(chan hubEvent, 1024)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
		h.idle = time.Now()
		h.mu.Unlock()
	}
}

func (h *hub) offer(id string) (bridge.Offer, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o, ok := h.offers[id]
	return o, ok
}

func (h *hub) closedText(id string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.closed[id]
	return t, ok
}

// inboxItem is one offer as a page shows it.
type inboxItem struct {
	bridge.Offer
	Critical bool
}

func itemOf(o bridge.Offer) inboxItem {
	return inboxItem{Offer: o, Critical: risk(o) > events.CriticalRisk}
}

func (s *Server) inboxPage(w http.ResponseWriter, r *http.Request, sess *session) {
	h := s.hub(sess.user.Identity)
	offers, seq := h.snapshot()
	n := min(len(offers), inboxPageSize)
	items := make([]inboxItem, n)
	for i, o := range offers[:n] {
		items[i] = itemOf(o)
	}
	s.renderPage(w, "inbox.html", "Inbox", "inbox", sess, inboxData{Items: items, Seq: seq, Total: len(offers), More: len(offers) - n})
}

// inboxPageSize is how many requests a page shows at first, the most
// urgent: a person works from the top, and a thousand waiting requests
// render in a fraction of a second this way ("show more" loads the next).
const inboxPageSize = 100

type inboxData struct {
	Items []inboxItem
	Seq   uint64
	Total int
	More  int
}

// inboxMore is the next requests of the inbox after the first offset, as
// HTML (the "show more" button).
func (s *Server) inboxMore(w http.ResponseWriter, r *http.Request, sess *session) {
	offset, err := strconv.Atoi(r.URL.Query().Get("offset"))
	if err != nil || offset < 0 {
		http.Error(w, "offset: a number", http.StatusBadRequest)
		return
	}
	offers, _ := s.hub(sess.user.Identity).snapshot()
	offset = min(offset, len(offers))
	end := min(offset+inboxPageSize, len(offers))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Heed-More", strconv.Itoa(len(offers)-end))
	for _, o := range offers[offset:end] {
		_, _ = w.Write([]byte(s.fragment("offer", itemOf(o))))
	}
}

// inboxEvents streams the inbox: every offer open now (the page skips
// what it shows already), then each new one and each closed one.
func (s *Server) inboxEvents(w http.ResponseWriter, r *http.Request, sess *session) {
	h := s.hub(sess.user.Identity)
	changes, stop := h.subscribe()
	defer stop()
	out, ok := startSSE(w)
	if !ok {
		return
	}
	// A page rendered at seq N needs only what changed since; any other
	// (or one too far behind) gets the whole inbox and drops what is gone.
	send := func(ev hubEvent) error {
		if ev.Offer != nil {
			return out.send("offer", map[string]string{"id": ev.Offer.ID, "html": s.fragment("offer", itemOf(*ev.Offer))})
		}
		return out.send("closed", map[string]any{"id": ev.Closed, "text": ev.Text, "mine": ev.Mine})
	}
	seq, err := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	var missed []hubEvent
	ok = err == nil
	if ok {
		missed, ok = h.since(seq)
	}
	sent := seq
	if ok {
		for _, ev := range missed {
			if send(ev) != nil {
				return
			}
			sent = ev.Seq
		}
	} else {
		// The most urgent page of it, and the list of what is open.
		offers, at := h.snapshot()
		sent = at
		ids := make([]string, len(offers))
		for i, o := range offers {
			ids[i] = o.ID
			if i < inboxPageSize && send(hubEvent{Offer: &o}) != nil {
				return
			}
		}
		if out.send("sync", map[string][]string{"open": ids}) != nil {
			return
		}
	}
	_ = out.send("ready", map[string]bool{"live": true})
	pump(r.Context(), out, changes, func(ev hubEvent, ok bool) error {
		switch {
		case !ok:
			return out.send("reload", map[string]string{})
		case ev.Seq <= sent:
			return nil // sent already (missed, or in the whole inbox)
		}
		return send(ev)
	})
}

// answerRequest is what a page sends.
type answerRequest struct {
	ID       string `json:"id"`
	Choice   string `json:"choice"`
	Remember bool   `json:"remember"`
	Reason   string `json:"reason"`
}

// answer sends the signed-in person's answer, channel web. Only a request
// the console offers them may be answered here: anything else (another
// person's request, an id they guessed) is refused without asking heed.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, sess *session) {
	var req answerRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		jsonError(w, http.StatusBadRequest, "the answer is not JSON: "+err.Error())
		return
	}
	h := s.hub(sess.user.Identity)
	o, ok := h.offer(req.ID)
	if !ok {
		if text, closed := h.closedText(req.ID); closed {
			writeJSON(w, http.StatusConflict, map[string]string{"error": "already answered " + text, "already": text})
			return
		}
		s.log.Warn("console: answer refused", "identity", sess.user.Identity, "confirm", truncate(req.ID, 140), "why", "not offered to them")
		jsonError(w, http.StatusForbidden, "this request is not offered to you")
		return
	}
	if !slices.ContainsFunc(o.Options, func(x bridge.Option) bool { return x.Value == req.Choice }) {
		jsonError(w, http.StatusBadRequest, "not an option of this request")
		return
	}
	cmd := command.AnswerConfirmation{ID: req.ID, Choice: req.Choice, By: sess.user.Identity, Channel: Channel, Reason: truncate(req.Reason, 2000)}
	if req.Remember && o.Remember {
		cmd.Remember = events.ScopeSkillStep
	}
	rep, err := s.c.Answer(r.Context(), cmd)
	if err != nil {
		if events.CodeOf(err) == events.CodeConflict {
			if st, lerr := s.c.Confirmation(r.Context(), req.ID); lerr == nil && st.Answer != nil {
				text := answeredText(*bridge.WinnerOf(st), o)
				writeJSON(w, http.StatusConflict, map[string]string{"error": "already answered " + text, "already": text})
				return
			}
		}
		jsonError(w, statusOf(err), events.Message(err))
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// answeredText says how a request closed, after "Already answered ":
// "by user:bob via slack: Approve", or "expired: default Reject".
func answeredText(w bridge.Winner, o bridge.Offer) string {
	if w.Method != events.MethodUser && w.Method != events.MethodAgent {
		return "— " + w.Describe(o)
	}
	label := w.Choice
	for _, opt := range o.Options {
		if opt.Value == w.Choice && opt.Label != "" {
			label = opt.Label
		}
	}
	s := "by " + w.By
	if w.Channel != "" {
		s += " via " + w.Channel
	}
	return s + ": " + label
}
