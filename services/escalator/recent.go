package escalator

import (
	"context"
	"sync"
)

// recentSet remembers the last max ids added (the oldest forgotten first).
// It grows as ids come: a heed that never sees an escalation holds none.
type recentSet struct {
	mu   sync.Mutex
	max  int
	ids  map[string]struct{}
	ring []string
	next int
}

func newRecentSet(max int) *recentSet {
	return &recentSet{max: max, ids: map[string]struct{}{}}
}

func (s *recentSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		return
	}
	s.ids[id] = struct{}{}
	if len(s.ring) < s.max {
		s.ring = append(s.ring, id)
		return
	}
	delete(s.ids, s.ring[s.next])
	s.ring[s.next] = id
	s.next = (s.next + 1) % s.max
}

func (s *recentSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

// inflight is the requests the command is deciding in this process right
// now. The consumer's copy of such a request's requested event waits for
// the command instead of reading and deciding the same request beside it
// (a race it would lose: its guarded write fails and it reads again).
type inflight struct {
	mu  sync.Mutex
	ids map[string]chan struct{}
}

func newInflight() *inflight { return &inflight{ids: map[string]chan struct{}{}} }

// start marks id in flight; the function it returns marks it done. A
// second start of an id in flight (the same request sent twice at once)
// is not marked: the first one's done releases the waiters.
func (f *inflight) start(id string) (done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ids[id]; ok {
		return func() {}
	}
	ch := make(chan struct{})
	f.ids[id] = ch
	return func() {
		f.mu.Lock()
		delete(f.ids, id)
		f.mu.Unlock()
		close(ch)
	}
}

// wait returns once id is not in flight, or ctx is done.
func (f *inflight) wait(ctx context.Context, id string) error {
	f.mu.Lock()
	ch, ok := f.ids[id]
	f.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
