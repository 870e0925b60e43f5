package skill

import (
	"sync"
)

// Cache keeps compiled skills by digest: a skill's source is in every run
// it started, and compiling it once per process is enough.
type Cache struct {
	mu sync.Mutex
	m  map[string]*Skill
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{m: map[string]*Skill{}} }

// Load returns the compiled skill for source, compiling it on first use.
// A nil Cache compiles every time.
func (c *Cache) Load(file, source, digest string) (*Skill, error) {
	if c == nil {
		return Load(file, []byte(source))
	}
	c.mu.Lock()
	sk, ok := c.m[digest]
	c.mu.Unlock()
	if ok {
		return sk, nil
	}
	sk, err := Load(file, []byte(source))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) > 1000 {
		c.m = map[string]*Skill{}
	}
	c.m[sk.Digest] = sk
	c.mu.Unlock()
	return sk, nil
}
