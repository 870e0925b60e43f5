package service

import (
	"testing"

	"github.com/heedhq/heed/events"
)

// TestObserverHotPathDoesNotAllocate: counting a publish or a delivery
// whose labels were seen before costs no allocation.
func TestObserverHotPathDoesNotAllocate(t *testing.T) {
	m := NewMetrics("test")
	m.Published("heed.run.started")
	m.Consumed("runner", "heed.run.started", events.OutcomeAcked)
	if n := testing.AllocsPerRun(1000, func() {
		m.Published("heed.run.started")
		m.Consumed("runner", "heed.run.started", events.OutcomeAcked)
	}); n != 0 {
		t.Fatalf("%v allocations per event, want 0", n)
	}
}
