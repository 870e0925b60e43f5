package events_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/heedhq/heed/events"
)

// An error says its code once, however it was wrapped.
func TestErrorSaysItsCodeOnce(t *testing.T) {
	inner := events.Errorf(events.CodeConflict, "run r1 is already failed")
	for _, c := range []struct {
		name      string
		err       error
		code      events.Code
		text, msg string
	}{
		{"plain", inner, events.CodeConflict, "conflict: run r1 is already failed", "run r1 is already failed"},
		{"same code quoted by %v", events.Errorf(events.CodeConflict, "cancel: %v", inner), events.CodeConflict,
			"conflict: cancel: run r1 is already failed", "cancel: run r1 is already failed"},
		{"same code wrapped by %w", events.Errorf(events.CodeConflict, "cancel: %w", inner), events.CodeConflict,
			"conflict: cancel: run r1 is already failed", "cancel: run r1 is already failed"},
		{"another code keeps the cause's", events.Errorf(events.CodeInvalidRequest, "record: %v", inner), events.CodeInvalidRequest,
			"invalid_request: record: conflict: run r1 is already failed", "record: conflict: run r1 is already failed"},
		{"fmt wrapper", fmt.Errorf("replay index: %w", inner), events.CodeConflict,
			"replay index: conflict: run r1 is already failed", "replay index: run r1 is already failed"},
		{"bare sentinel", fmt.Errorf("answer a1: %w", events.ErrNotFound), events.CodeNotFound,
			"answer a1: not_found", "answer a1"},
		{"plain error", errors.New("boom"), events.CodeInternal, "boom", "boom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.err.Error(); got != c.text {
				t.Errorf("Error() = %q, want %q", got, c.text)
			}
			if got := events.Message(c.err); got != c.msg {
				t.Errorf("Message = %q, want %q", got, c.msg)
			}
			if got := events.CodeOf(c.err); got != c.code {
				t.Errorf("CodeOf = %q, want %q", got, c.code)
			}
		})
	}
}
