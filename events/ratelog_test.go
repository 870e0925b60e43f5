package events_test

import (
	"testing"

	"github.com/heedhq/heed/events"
)

// TestTallyLogsOnceASecond: the first occurrence is logged at once; the
// ones right after it are counted, not logged.
func TestTallyLogsOnceASecond(t *testing.T) {
	var tl events.Tally
	if n, log := tl.Add(); !log || n != 1 {
		t.Fatalf("first: %d, %v; want 1, logged", n, log)
	}
	for i := range 5 {
		if n, log := tl.Add(); log || n != int64(i+1) {
			t.Fatalf("occurrence %d within the second: %d, %v; want counted, not logged", i+2, n, log)
		}
	}
}
