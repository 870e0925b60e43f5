package confirmation

import (
	"math"
	"time"
)

// Bounds are the confirm router's timeouts: what a request without
// timeout_s gets, and the range every request's is clamped to.
type Bounds struct {
	Default, Min, Max time.Duration
}

// DefaultBounds are the router's bounds unless it is configured
// otherwise: 300 s when a request names none, clamped to [1 s, 24 h]
// (docs/CONFIRMATIONS.md).
func DefaultBounds() Bounds {
	return Bounds{Default: 300 * time.Second, Min: time.Second, Max: 24 * time.Hour}
}

// Deadline is when a request made at t with timeoutS expires: the one
// computation of the router (which schedules it) and of everything that
// shows it, so that a terminal, a notification and an agent show the
// deadline the router keeps.
func (b Bounds) Deadline(t time.Time, timeoutS float64) time.Time {
	var d time.Duration
	switch {
	case math.IsNaN(timeoutS) || timeoutS <= 0:
		d = b.Default
	case timeoutS >= b.Max.Seconds():
		// Compared as seconds: 1e10 s in nanoseconds overflows a Duration.
		d = b.Max
	default:
		d = time.Duration(timeoutS * float64(time.Second)) // at least 0; a tiny one is the minimum
	}
	return t.Add(min(max(d, b.Min), b.Max))
}

// Deadline is when the confirmation's default applies, under the
// router's default bounds (a router configured with others keeps its
// own): the zero time before the request is known.
func (s *State) Deadline() time.Time {
	if s == nil || s.Request == nil || s.RequestedAt.IsZero() {
		return time.Time{}
	}
	return DefaultBounds().Deadline(s.RequestedAt, s.Request.TimeoutS)
}
