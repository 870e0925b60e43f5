package escalator

import (
	"context"
	"sync"
)

// recentSet remembers the last max ids added (the oldest forgotten first),
// each with a number (the escalator's: how far the request had got).
// It grows as ids come: a heed that never sees an escalation holds none.
type recentSet struct {
	mu   sync.Mutex
	max  int
	ids  map[string]int
	ring []string
	next int
}

func newRecentSet(max int) *recentSet {
	return &recentSet{max: max, ids: map[string]int{}}
}

// add remembers id with n (an id added again keeps its slot, with the
// larger n).
func (s *recentSet) add(id string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.ids[id]; ok {
		s.ids[id] = max(old, n)
		return
	}
	s.ids[id] = n
	if len(s.ring) < s.max {
		s.ring = append(s.ring, id)
		return
	}
	delete(s.ids, s.ring[s.next])
	s.ring[s.next] = id
	s.next = (s.next + 1) % s.max
}

func (s *recentSet) has(id string) bool {
	_, ok := s.get(id)
	return ok
}

func (s *recentSet) get(id string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.ids[id]
	return n, ok
}

// inflight is the requests the command is deciding in this process right
// now. The consumer's copy of such a request's requested event waits for
// the command instead of reading and deciding the same request beside it
// (a race it would lose: its guarded write fails and it reads again).
type inflight struct {
	mu  sync.Mutex
	ids map[string]*flight
}

type flight struct {
	n    int // calls deciding it (the same request sent twice at once)
	done chan struct{}
}

func newInflight() *inflight { return &inflight{ids: map[string]*flight{}} }

// start marks id in flight; the function it returns marks this call done.
// The waiters are released when the last call on id is done.
func (f *inflight) start(id string) (done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.ids[id]
	if fl == nil {
		fl = &flight{done: make(chan struct{})}
		f.ids[id] = fl
	}
	fl.n++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if fl.n--; fl.n == 0 {
			delete(f.ids, id)
			close(fl.done)
		}
	}
}

// wait returns once id is not in flight, or ctx is done.
func (f *inflight) wait(ctx context.Context, id string) error {
	f.mu.Lock()
	fl := f.ids[id]
	f.mu.Unlock()
	if fl == nil {
		return nil
	}
	select {
	case <-fl.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
