package changesets

import (
	"hash/fnv"
	"sync"

	"github.com/heedhq/heed/events/command"
)

// setCache keeps the sets this service decided last, as it left them, so
// that the next decision on one of them needs no read: the write is
// guarded by the set's verdict sequence, so a copy that is behind the log
// (another instance, an outside writer) makes the write fail, and the set
// is read again. Decisions on one set are taken one at a time in this
// process (a lock per set, striped): reviewers deciding items of one set at
// once queue for a millisecond instead of racing and reading again.
type setCache struct {
	locks [256]sync.Mutex

	mu    sync.Mutex
	sets  map[string]*command.ChangeSetState
	order []string // oldest first; may hold ids removed since
	max   int
}

func newSetCache(max int) *setCache {
	return &setCache{sets: map[string]*command.ChangeSetState{}, max: max}
}

// lock takes the set's lock; the returned func releases it.
func (c *setCache) lock(id string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	m := &c.locks[h.Sum32()%uint32(len(c.locks))]
	m.Lock()
	return m.Unlock
}

// get returns a copy of the cached set, or nil.
func (c *setCache) get(id string) *command.ChangeSetState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.sets[id]
	if !ok {
		return nil
	}
	cp := *st
	cp.Items = append([]command.ChangeItemState(nil), st.Items...)
	return &cp
}

// put keeps st (the caller's copy, as it wrote it).
func (c *setCache) put(st *command.ChangeSetState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sets[st.ID]; !ok {
		c.order = append(c.order, st.ID)
	}
	cp := *st
	cp.Items = append([]command.ChangeItemState(nil), st.Items...)
	c.sets[st.ID] = &cp
	for len(c.sets) > c.max && len(c.order) > 0 {
		delete(c.sets, c.order[0])
		c.order = c.order[1:]
	}
	if len(c.order) > 4*c.max {
		kept := c.order[:0]
		for _, id := range c.order {
			if _, ok := c.sets[id]; ok {
				kept = append(kept, id)
			}
		}
		c.order = kept
	}
}

// drop forgets a set (its copy was behind the log).
func (c *setCache) drop(id string) {
	c.mu.Lock()
	delete(c.sets, id)
	c.mu.Unlock()
}
