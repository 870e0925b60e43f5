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
	if hasControl(req.Requester) {
		return "requester contains control characters"
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
	return validateQuorum(req.Approvers, req.Quorum, seen)
}

// validateQuorum checks approvers and a quorum against each other and the
// options (values): a quorum no set of approvers can reach, or a veto
// that is not an option, could never be answered as asked.
func validateQuorum(approvers []string, q *events.Quorum, options map[string]bool) string {
	named := map[string]bool{}
	for _, a := range approvers {
		if strings.TrimSpace(a) == "" {
			return "an approver is empty"
		}
		if hasControl(a) {
			return fmt.Sprintf("approver %q contains control characters", a)
		}
		if named[a] {
			return "approver " + a + " appears twice"
		}
		named[a] = true
	}
	if q == nil {
		return ""
	}
	if q.Required < 2 {
		return fmt.Sprintf("quorum.required is %d; a quorum needs at least 2 (leave it out for a single answer)", q.Required)
	}
	if len(approvers) > 0 && q.Required > len(approvers) {
		return fmt.Sprintf("quorum.required is %d but only %d approvers are named", q.Required, len(approvers))
	}
	for _, v := range q.Veto {
		if !options[v] {
			return "veto " + v + " is not one of the options"
		}
	}
	return ""
}

// ValidateEscalation reports what would make an escalation's offers
// unanswerable, in the terms Validate judges them by (the offers are
// confirmations, options approve, deny and escalate): control characters
// in what the offer shows, approvers and a quorum that cannot be met. A
// request refused here is refused at once (invalid_request), not offered
// and then denied by the router's error answer.
func ValidateEscalation(req *events.EscalationRequestedData, options []string) string {
	for _, f := range []struct{ name, v string }{{"session", req.Session}, {"operation", req.Operation}, {"scope", req.Scope}, {"environment", req.Environment}, {"title", req.Title}, {"requester", req.Requester}} {
		// One line each in the offer: a line break or a reordering mark
		// could make an approver read a line that is not there.
		if hasControl(f.v) || strings.ContainsAny(f.v, "\n\t\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069") {
			return f.name + " contains control characters (one line, no line breaks, tabs or direction marks)"
		}
	}
	if hasControl(req.Message) {
		return "message contains control characters"
	}
	opts := map[string]bool{}
	for _, o := range options {
		opts[o] = true
	}
	return validateQuorum(req.Approvers, req.Quorum, opts)
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
