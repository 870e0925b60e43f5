package confirm

import (
	"sync"

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

type gates struct {
	mu    sync.Mutex
	m     map[string]*confirmation.State
	order []string
	max   int
	first func(id string) (seq uint64, ok bool) // the sequence of a confirmation's first message
}

func newGates(max int, first func(id string) (uint64, bool)) *gates {
	return &gates{m: map[string]*confirmation.State{}, max: max, first: first}
}

// observe folds a delivery into the cache and returns the confirmation's
// state if the cache holds all of it, else nil.
func (g *gates) observe(d *events.Delivery) *confirmation.State {
	id := d.Event.Subject()
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.m[id]
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
			delete(g.m, g.order[0])
			g.order = g.order[1:]
		}
	}
	if _, err := st.Apply(d.Event, d.Seq); err != nil {
		delete(g.m, id)
		return nil
	}
	return st
}

// drop forgets a confirmation (its handler failed: the event comes back).
func (g *gates) drop(id string) {
	g.mu.Lock()
	delete(g.m, id)
	g.mu.Unlock()
}

// deadlineView is what a fired deadline needs to know of a confirmation.
type deadlineView struct {
	open, expired bool
	dflt, runID   string
	lastSeq       uint64
}

// view returns what the cache knows of a confirmation, if it holds it.
func (g *gates) view(id string) (deadlineView, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.m[id]
	if !ok {
		return deadlineView{}, false
	}
	return deadlineView{open: st.Open(), expired: st.Expired != nil, dflt: st.Gate.Default, runID: st.Gate.RunID, lastSeq: st.LastSeq}, true
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
