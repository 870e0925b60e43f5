package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/heedhq/heed/events"
)

// report prints every error in one shape and maps it to the documented
// exit status.
func TestReport(t *testing.T) {
	for _, c := range []struct {
		name        string
		err         error
		interrupted bool
		status      int
		out         string
	}{
		{"ok", nil, false, exitOK, ""},
		{"bad input", badInput("--status %q: use one of a, b", "weird"), false, exitUsage, "heed: invalid_request: --status \"weird\": use one of a, b\n"},
		{"not found", events.Errorf(events.CodeNotFound, "no run %q", "r1"), false, exitUsage, "heed: not_found: no run \"r1\"\n"},
		{"conflict", events.Errorf(events.CodeConflict, "run r1 is already failed"), false, exitFailure, "heed: conflict: run r1 is already failed\n"},
		{"wrapped: the code once", fmt.Errorf("replay index: %w", events.Errorf(events.CodeUnavailable, "bucket gone")), false, exitFailure, "heed: unavailable: replay index: bucket gone\n"},
		{"plain error", errors.New("boom"), false, exitFailure, "heed: internal: boom\n"},
		{"usage", &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: "unknown flag: --bogus", usage: "heed runs"}, false, exitUsage,
			"heed: invalid_request: unknown flag: --bogus\nRun 'heed runs --help' for usage.\n"},
		{"run ended not completed", &exitError{status: exitNotCompleted}, false, exitNotCompleted, ""},
		{"interrupted", context.Canceled, true, exitInterrupted, "heed: interrupted\n"},
		{"interrupted while following", &exitError{status: exitInterrupted, msg: "stopped following; run r1 goes on"}, true, exitInterrupted, "heed: stopped following; run r1 goes on\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if got := report(&b, c.err, c.interrupted, "heed:"); got != c.status {
				t.Errorf("status %d, want %d", got, c.status)
			}
			if b.String() != c.out {
				t.Errorf("printed %q, want %q", b.String(), c.out)
			}
		})
	}
}
