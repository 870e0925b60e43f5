package changeset

import (
	"sync"

	"github.com/heedhq/heed/events/command"
)

// Cache keeps the sets a process read or wrote last, as of their Seq, so
// that the next look at one reads only what came after (Refresh) or, for
// a writer whose write is guarded, nothing at all. It holds at most max
// sets (the oldest put go first) and hands out copies: a caller may change
// what it got without touching the cache.
type Cache struct {
	mu    sync.Mutex
	sets  map[string]*command.ChangeSetState
	order []string // oldest first; may hold ids dropped since
	max   int
}

// NewCache is a cache of at most max sets.
func NewCache(max int) *Cache {
	return &Cache{sets: map[string]*command.ChangeSetState{}, max: max}
}

// Get returns a copy of the cached set, or nil.
func (c *Cache) Get(id string) *command.ChangeSetState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.sets[id]
	if !ok {
		return nil
	}
	return Clone(st)
}

// Put keeps a copy of st.
func (c *Cache) Put(st *command.ChangeSetState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sets[st.ID]; !ok {
		c.order = append(c.order, st.ID)
	}
	c.sets[st.ID] = Clone(st)
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

// Drop forgets a set (a copy that is behind the log, or unsure).
func (c *Cache) Drop(id string) {
	c.mu.Lock()
	delete(c.sets, id)
	c.mu.Unlock()
}

// Clone copies a set's state so that folding more events into one leaves
// the other as it was (Apply replaces an item's fields, never edits its
// maps in place).
func Clone(st *command.ChangeSetState) *command.ChangeSetState {
	cp := *st
	cp.Items = append([]command.ChangeItemState(nil), st.Items...)
	return &cp
}
