package skill

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

// Cache bounds. A skill's source is at most MaxSourceBytes, so the bytes
// bound is what keeps a stream of large distinct skills from holding
// memory; the count bound keeps many small ones cheap to look up.
const (
	cacheMaxSkills = 512
	cacheMaxBytes  = 32 << 20 // of source; the compiled form is of the same order
)

// Cache keeps compiled skills by the digest of their source: a skill's
// source is in every run it started and in every start request, and
// compiling it once per process is enough. It is bounded (least recently
// used skills go first) and compiles a skill once even when many callers
// ask for it at the same moment. Safe for concurrent use.
type Cache struct {
	mu    sync.Mutex
	m     map[string]*list.Element // digest → entry in lru
	lru   *list.List               // front: most recently used
	bytes int
}

type cacheEntry struct {
	digest string
	size   int
	done   chan struct{} // closed when sk and err are set
	sk     *Skill
	err    error
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{m: map[string]*list.Element{}, lru: list.New()} }

// Load returns the compiled skill for source, compiling it on first use.
// The key is the sha256 of source, computed here: a digest that comes with
// the source (in an event anyone may write) is not trusted to name it. A
// skill that does not load is not kept (the next call compiles it again
// and gets the same error). The cached skill keeps the file name it was
// first compiled under. A nil Cache compiles every time.
func (c *Cache) Load(file, source string) (*Skill, error) {
	if c == nil {
		return Load(file, []byte(source))
	}
	sum := sha256.Sum256([]byte(source))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	c.mu.Lock()
	if el, ok := c.m[digest]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		<-e.done
		if e.err == nil {
			return e.sk, nil
		}
		// The compile this call waited on failed: compile for this
		// caller too, so that its error names its file.
		return Load(file, []byte(source))
	}
	e := &cacheEntry{digest: digest, size: len(source), done: make(chan struct{})}
	c.m[digest] = c.lru.PushFront(e)
	c.bytes += e.size
	c.evict()
	c.mu.Unlock()

	e.sk, e.err = Load(file, []byte(source))
	close(e.done)
	if e.err != nil {
		c.mu.Lock()
		if el, ok := c.m[digest]; ok && el.Value.(*cacheEntry) == e {
			c.remove(el)
		}
		c.mu.Unlock()
	}
	return e.sk, e.err
}

// Len is how many skills the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// evict drops least recently used skills past the bounds; the newest
// stays even if it alone is past them. c.mu is held.
func (c *Cache) evict() {
	for c.lru.Len() > 1 && (c.lru.Len() > cacheMaxSkills || c.bytes > cacheMaxBytes) {
		c.remove(c.lru.Back())
	}
}

func (c *Cache) remove(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.m, e.digest)
	c.bytes -= e.size
}
