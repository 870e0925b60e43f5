package escalator

import "sync"

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
