package events

import "testing"

// Guarded batches go as fast batches only to a server that knows them: an
// older one would store a batch's messages as plain publishes, the ones
// behind a refused guard among them.
func TestFastBatchVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"2.15.2": true, "2.14.0": true, "2.14.0-beta.1": true, "3.0.0": true,
		"2.13.9": false, "2.12.1": false, "2.9.25": false, "1.4.1": false, "": false, "garbage": false,
	} {
		if got := fastBatchVersion(v); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
