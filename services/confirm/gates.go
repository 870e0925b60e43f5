package confirm

import (
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/confirmation"
)

// gates keeps the confirmations the answers consumer has seen whole, so
// that judging an answer needs no read of the log. A state is kept only if
// the consumer delivered its request the first time and every later event
// of the confirmation in order, first time too: JetStream delivers a
// consumer's messages in log order, and only a redelivery (a retried
// handler) can break that, so any redelivery drops the state and the next
// answer is judged from the log. Events before the request cannot change
// the verdict of any answer (an answer before its question is refused
// whatever follows). A second request with the same id (anyone may publish
// one) starts nothing: a state is seeded only by the confirmation's first
// message, which first reports. The cache is bounded; a state it lost is
// read again.
// heldConfirmations bounds the states the router keeps: the newest this
// many confirmations are judged from memory (about 1.5 KB each), older
// ones from the log (one batched read, about a millisecond), so that the
// router's memory stays flat however many questions wait (BENCHMARKS.md,
// 10,000 pending). The runner keeps its newest 1,000 waiting runs the
// same way.
const heldConfirmations = 2048

// heldWaiting bounds the open confirmations pushed out of the cache whose
// deadline the router still follows from memory (about 200 bytes each):
// enough that a burst of 10,000 deadlines falling at once is worked off
// by the answers consumer with one write each, not three reads and a
// write (BENCHMARKS.md, "10,000 confirmations whose deadlines fall at the
// same moment").
const heldWaiting = 100_000

type gates struct {
	mu    sync.Mutex
	m     map[string]*confirmation.State
	order []string
	max   int
	first func(id string) (seq uint64, ok bool) // the sequence of a confirmation's first message

	// waiting are open confirmations evicted from m, kept as what their
	// deadline needs, and followed event by event like m's states (an
	// answer, a redelivery or an event out of order drops one).
	waiting      map[string]*waitingGate
	waitingOrder []string
	maxWaiting   int

	// uncached are confirmations an event of which a consumer held back
	// (heldBack): never cached again here, since an earlier delivery still
	// queued would seed the cache and a later one fold onto it, without
	// the held-back event. Bounded (oldest forgotten first): a lease blip
	// is rare and holds back a few.
	uncached      map[string]bool
	uncachedOrder []string
}

// maxUncached bounds gates.uncached.
const maxUncached = 4096

// waitingGate is what a deadline needs of an open confirmation: its gate
// (plain data, judged as every reader judges) and the last event followed.
type waitingGate struct {
	gate    confirmation.Gate
	lastSeq uint64
	// requestedAt and timeoutS are the request's: when its deadline falls.
	requestedAt time.Time
	timeoutS    float64
	expired     *events.ConfirmExpiredData // the first expiry, if it came
	// settled is the sequence of the deadline's default answer, which
	// took effect: kept until the answers consumer has taken it.
	settled uint64
}

func newGates(max int, first func(id string) (uint64, bool)) *gates {
	return &gates{m: map[string]*confirmation.State{}, max: max, first: first, waiting: map[string]*waitingGate{}, maxWaiting: heldWaiting, uncached: map[string]bool{}}
}

// evict pushes the oldest state out of m; if its confirmation is open, its
// deadline's needs stay in waiting. Lock held.
func (g *gates) evict() {
	id := g.order[0]
	g.order = g.order[1:]
	st, ok := g.m[id]
	delete(g.m, id)
	if !ok || !st.Open() || g.maxWaiting <= 0 {
		return
	}
	gate := st.Gate
	gate.Votes = slices.Clone(gate.Votes)
	w := &waitingGate{gate: gate, lastSeq: st.LastSeq, expired: st.Expired, requestedAt: st.RequestedAt}
	if st.Request != nil {
		w.timeoutS = st.Request.TimeoutS
	}
	g.waiting[id] = w
	g.waitingOrder = append(g.waitingOrder, id)
	for len(g.waitingOrder) > g.maxWaiting {
		delete(g.waiting, g.waitingOrder[0])
		g.waitingOrder = g.waitingOrder[1:]
	}
	if len(g.waitingOrder) > 2*len(g.waiting)+1024 {
		// Ids long gone (answered, dropped) make up most of the order:
		// keep only the live ones.
		live := g.waitingOrder[:0]
		for _, w := range g.waitingOrder {
			if _, ok := g.waiting[w]; ok {
				live = append(live, w)
			}
		}
		g.waitingOrder = live
	}
}

// observeWaiting follows an event of a confirmation held in waiting.
// Lock held.
func (g *gates) observeWaiting(id string, w *waitingGate, d *events.Delivery) {
	if d.Delivered > 1 || d.Seq <= w.lastSeq {
		delete(g.waiting, id)
		return
	}
	switch events.Type(d.Event.Type()) {
	case events.ConfirmAnswered:
		// The deadline's default answer (method timeout, nothing to
		// remember) is judged here as every reader judges it; when it
		// takes effect the confirmation is settled. Any other answer may
		// need the whole confirmation (its request, to remember a choice):
		// then the log.
		var a events.ConfirmAnsweredData
		if w.settled == 0 && json.Unmarshal(d.Event.Data(), &a) == nil && a.Method == events.MethodTimeout && a.Remember == "" &&
			w.gate.Judge(&a) == nil && w.gate.Decides(&a) {
			w.gate.Answer(d.Event.ID(), &a, d.Event.Time(), d.Seq)
			w.settled, w.lastSeq = d.Seq, d.Seq
			return
		}
		delete(g.waiting, id)
		return
	case events.ConfirmExpired:
		var e events.ConfirmExpiredData
		if err := json.Unmarshal(d.Event.Data(), &e); err != nil {
			delete(g.waiting, id)
			return
		}
		if w.expired == nil && w.gate.Open() {
			w.expired = &e
		}
		w.gate.Expire(&e)
	}
	w.lastSeq = d.Seq
}

// observe folds a delivery into the cache and returns the confirmation's
// state if the cache holds all of it, else nil.
func (g *gates) observe(d *events.Delivery) *confirmation.State {
	id := d.Event.Subject()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.uncached[id] {
		return nil
	}
	st := g.m[id]
	if st == nil {
		if w, ok := g.waiting[id]; ok {
			g.observeWaiting(id, w, d)
			return nil
		}
	}
	if d.Delivered > 1 || (st != nil && d.Seq <= st.LastSeq) {
		delete(g.m, id)
		return nil
	}
	if st == nil {
		if events.Type(d.Event.Type()) != events.ConfirmRequested {
			return nil
		}
		if seq, ok := g.first(id); !ok || seq != d.Seq {
			return nil // not the confirmation's first message: read it whole when needed
		}
		st = confirmation.New(id)
		g.m[id] = st
		g.order = append(g.order, id)
		if len(g.order) > g.max {
			g.evict()
		}
	}
	if _, err := st.Apply(d.Event, d.Seq); err != nil {
		delete(g.m, id)
		return nil
	}
	return st
}

// heldBack forgets a confirmation an event of which a consumer held back,
// and keeps it out of the cache from now on (see uncached).
func (g *gates) heldBack(id string) {
	g.mu.Lock()
	delete(g.m, id)
	delete(g.waiting, id)
	if !g.uncached[id] {
		g.uncached[id] = true
		g.uncachedOrder = append(g.uncachedOrder, id)
		if len(g.uncachedOrder) > maxUncached {
			delete(g.uncached, g.uncachedOrder[0])
			g.uncachedOrder = g.uncachedOrder[1:]
		}
	}
	g.mu.Unlock()
}

// drop forgets a confirmation (its handler failed: the event comes back).
func (g *gates) drop(id string) {
	g.mu.Lock()
	delete(g.m, id)
	delete(g.waiting, id)
	g.mu.Unlock()
}

// deadlineView is what a fired deadline needs to know of a confirmation.
type deadlineView struct {
	open, expired bool
	dflt, runID   string
	lastSeq       uint64
	deadline      time.Time // of the expiry, when expired
	// requestedAt and timeoutS are the request's (zero: not known), to
	// tell a deadline that fired before its time.
	requestedAt time.Time
	timeoutS    float64
}

// viewOf is the deadline view of a whole confirmation.
func viewOf(st *confirmation.State) deadlineView {
	v := deadlineView{open: st.Open(), expired: st.Expired != nil, dflt: st.Gate.Default, runID: st.Gate.RunID, lastSeq: st.LastSeq, requestedAt: st.RequestedAt}
	if st.Request != nil {
		v.timeoutS = st.Request.TimeoutS
	}
	if st.Expired != nil {
		v.deadline = st.Expired.Deadline
	}
	return v
}

// takeSettled reports whether the answer at seq is the router's own
// timeout answer to a confirmation held in waiting (it took effect), and
// forgets the confirmation.
func (g *gates) takeSettled(id string, seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	w, ok := g.waiting[id]
	if !ok || w.settled == 0 || w.settled != seq {
		return false
	}
	delete(g.waiting, id)
	return true
}

// view returns what the cache knows of a confirmation, if it holds it
// (whole, or as an open one waiting for its deadline).
func (g *gates) view(id string) (deadlineView, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st, ok := g.m[id]; ok {
		return viewOf(st), true
	}
	if w, ok := g.waiting[id]; ok {
		v := deadlineView{open: w.gate.Open(), expired: w.expired != nil, dflt: w.gate.Default, runID: w.gate.RunID, lastSeq: w.lastSeq, requestedAt: w.requestedAt, timeoutS: w.timeoutS}
		if w.expired != nil {
			v.deadline = w.expired.Deadline
		}
		return v, true
	}
	return deadlineView{}, false
}

// state returns a copy of the confirmation as the cache holds it, if it
// does. It may be behind the log (the consumer has not seen the latest
// events yet); a write guarded by its LastSeq finds that out.
func (g *gates) state(id string) *confirmation.State {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st, ok := g.m[id]; ok {
		return st.Clone()
	}
	return nil
}

// compact drops, under the cache's lock, what only the answer that took
// effect needed of a cached confirmation: the answer command clones
// cached states at any moment.
func (g *gates) compact(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st, ok := g.m[id]; ok {
		st.Compact()
	}
}
