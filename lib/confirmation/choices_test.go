package confirmation

import (
	"strings"
	"testing"

	"github.com/heedhq/heed/events"
)

// TestRequesterIsOneSafeLine: the requester is printed beside what is
// asked (heed escalation show, heed confirm show): an escape sequence or a
// direction mark in it is refused at the door, as in the title.
func TestRequesterIsOneSafeLine(t *testing.T) {
	esc := &events.EscalationRequestedData{Session: "s", Operation: "deploy", Requester: "agent/x\x1b[2J"}
	if why := ValidateEscalation(esc, []string{"approve", "deny"}); !strings.Contains(why, "requester") {
		t.Errorf("an escalation whose requester holds an escape: %q, want a refusal naming the requester", why)
	}
	esc.Requester = "agent/\u202ex"
	if why := ValidateEscalation(esc, []string{"approve", "deny"}); !strings.Contains(why, "requester") {
		t.Errorf("an escalation whose requester holds a direction override: %q", why)
	}
	esc.Requester = "agent/ci"
	if why := ValidateEscalation(esc, []string{"approve", "deny"}); why != "" {
		t.Errorf("a plain requester: %q", why)
	}
	req := &events.ConfirmRequestedData{Message: "ok?", Requester: "agent/x\x1b]0;owned\x07", Options: []events.Option{{Label: "Yes", Value: "proceed"}}}
	if why := Validate(req); !strings.Contains(why, "requester") {
		t.Errorf("a confirmation whose requester holds an escape: %q", why)
	}
}
