package confirmation

import (
	"math"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
)

// TestStateDeadlineIsTheRoutersClamp: what a terminal, a notification and
// an agent show as the deadline is the one the router schedules: a
// timeout of 25 h is 24 h away, none is 300 s, a huge one does not
// overflow, a tiny one is a second.
func TestStateDeadlineIsTheRoutersClamp(t *testing.T) {
	at := time.Date(2026, 11, 28, 16, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		timeoutS float64
		want     time.Duration
	}{
		{90000, 24 * time.Hour},
		{0, 300 * time.Second},
		{-5, 300 * time.Second},
		{math.NaN(), 300 * time.Second},
		{1e10, 24 * time.Hour},
		{0.001, time.Second},
		{120, 2 * time.Minute},
	} {
		st := &State{Request: &events.ConfirmRequestedData{TimeoutS: c.timeoutS}, RequestedAt: at}
		if got := st.Deadline().Sub(at); got != c.want {
			t.Errorf("timeout_s %v: deadline in %v, want %v", c.timeoutS, got, c.want)
		}
	}
	if !(&State{}).Deadline().IsZero() {
		t.Error("a state without its request has a deadline")
	}
}
