package confirmation

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/heedhq/heed/events"
)

// ProceedChoice is the option --yes picks: one whose value means go ahead,
// else the first option that is not a cancel.
func ProceedChoice(req *events.ConfirmRequestedData) string {
	for _, want := range []string{"proceed", "yes", "continue", "approve", "confirm", "ok"} {
		for _, o := range req.Options {
			if strings.EqualFold(o.Value, want) {
				return o.Value
			}
		}
	}
	for _, o := range req.Options {
		if !IsCancel(o.Value) {
			return o.Value
		}
	}
	if len(req.Options) == 0 {
		return ""
	}
	return req.Options[0].Value
}

// DefaultChoice is what a timeout answers: the request's default, else the
// safest option.
func DefaultChoice(req *events.ConfirmRequestedData) string {
	if req.Default != "" {
		return req.Default
	}
	return SafeChoice(req)
}

// SafeChoice prefers cancelling.
func SafeChoice(req *events.ConfirmRequestedData) string {
	for _, o := range req.Options {
		if IsCancel(o.Value) {
			return o.Value
		}
	}
	if len(req.Options) == 0 {
		return "cancel"
	}
	return req.Options[len(req.Options)-1].Value
}

// IsCancel reports whether an option value means stop.
func IsCancel(v string) bool {
	switch strings.ToLower(v) {
	case "cancel", "abort", "no", "deny", "reject", "stop":
		return true
	}
	return false
}

// MaxMessageBytes bounds a confirmation's message.
const MaxMessageBytes = 8000

// Validate reports what makes a request unanswerable: an empty or
// over-long message, control characters in the message, title or options,
// no options, duplicate option values, a default that is not an option.
func Validate(req *events.ConfirmRequestedData) string {
	if strings.TrimSpace(req.Message) == "" {
		return "empty message"
	}
	if len(req.Message) > MaxMessageBytes {
		return fmt.Sprintf("message is %d bytes; the limit is %d", len(req.Message), MaxMessageBytes)
	}
	if len(req.Options) == 0 {
		return "no options"
	}
	if hasControl(req.Message) {
		return "message contains control characters"
	}
	// The title and options reach the same terminals as the message: an
	// escape sequence there could disguise what is being asked.
	if hasControl(req.Title) {
		return "title contains control characters"
	}
	seen := map[string]bool{}
	for _, o := range req.Options {
		if strings.TrimSpace(o.Value) == "" || strings.TrimSpace(o.Label) == "" {
			return "an option has an empty label or value"
		}
		if hasControl(o.Value) || hasControl(o.Label) || hasControl(o.Description) {
			return fmt.Sprintf("option %q contains control characters", o.Value)
		}
		if seen[o.Value] {
			return "option value " + o.Value + " appears twice"
		}
		seen[o.Value] = true
	}
	if req.Default != "" && !seen[req.Default] {
		return "default " + req.Default + " is not one of the options"
	}
	return ""
}

// hasControl reports whether s holds a control character (C0, DEL, C1)
// other than a line feed or a tab: escape sequences, carriage returns.
func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return true
		}
	}
	return false
}
