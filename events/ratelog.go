package events

import (
	"sync/atomic"
	"time"
)

// Tally counts occurrences of something worth a log line and says when
// to write one: at most once a second, with how many there were since the
// last line. A flood (every delivery of a stale instance, a push consumer
// aimed at a command subject) stays one line a second. Safe for
// concurrent use; the zero value is ready.
type Tally struct {
	logged, n atomic.Int64 // when the last line was written (Unix ns); occurrences since
}

// Add counts one occurrence and reports whether to log now, and the count
// the line should give (this one included).
func (t *Tally) Add() (n int64, log bool) {
	n = t.n.Add(1)
	now := time.Now().UnixNano()
	last := t.logged.Load()
	if now-last < int64(time.Second) || !t.logged.CompareAndSwap(last, now) {
		return n, false
	}
	t.n.Add(-n)
	return n, true
}
