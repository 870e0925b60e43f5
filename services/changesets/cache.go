package changesets

import (
	"hash/fnv"
	"sync"

	"github.com/heedhq/heed/lib/changeset"
)

// setCache keeps the sets this service decided last, as it left them, so
// that the next decision on one of them needs no read: the write is
// guarded by the set's verdict sequence, so a copy that is behind the log
// (another instance, an outside writer) makes the write fail, and the set
// is read again. Decisions on one set are taken one at a time in this
// process (a lock per set, striped): reviewers deciding items of one set at
// once queue for a millisecond instead of racing and reading again.
type setCache struct {
	*changeset.Cache
	locks [256]sync.Mutex
}

func newSetCache(max int) *setCache { return &setCache{Cache: changeset.NewCache(max)} }

// lock takes the set's lock; the returned func releases it.
func (c *setCache) lock(id string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	m := &c.locks[h.Sum32()%uint32(len(c.locks))]
	m.Lock()
	return m.Unlock
}
