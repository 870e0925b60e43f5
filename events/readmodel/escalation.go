package readmodel

import (
	"time"

	"github.com/heedhq/heed/events"
)

// EscalationsConsumer is the escalator's projector of heed_escalations.
const EscalationsConsumer = "proj-escalations"

// EscalationKey is the heed_escalations key of an escalation.
func EscalationKey(id string) string { return "esc." + id }

// SessionKey is the heed_escalations key of a session's held requests.
func SessionKey(session string) string { return "session." + events.Token(session) }

// Escalation is the summary of one escalation (heed_escalations,
// key EscalationKey). Status is held, approved or denied.
type Escalation struct {
	ID              string    `json:"id"`
	Session         string    `json:"session"`
	Operation       string    `json:"operation"`
	Scope           string    `json:"scope,omitempty"`
	Environment     string    `json:"environment,omitempty"`
	Risk            float64   `json:"risk"`
	Confidence      float64   `json:"confidence"`
	Critical        bool      `json:"critical,omitempty"`
	Route           string    `json:"route,omitempty"` // the routing decision
	Status          string    `json:"status"`
	Method          string    `json:"method,omitempty"` // how it was decided
	By              string    `json:"by,omitempty"`
	Tier            string    `json:"tier,omitempty"`
	ConfirmID       string    `json:"confirm_id,omitempty"` // the current offer
	EscalationCount int       `json:"escalation_count"`
	Priority        int       `json:"priority,omitempty"`
	Outcome         string    `json:"outcome,omitempty"`
	RequestedAt     time.Time `json:"requested_at"`
	DecidedAt       time.Time `json:"decided_at,omitzero"`
}

// SessionEscalations counts a session's held requests (heed_escalations,
// key SessionKey; deleted when none is left). Which ones they are: the
// summaries (EscalationKey) of that session whose status is held, or
// `heed held SESSION`. A count, not a list: every request that joins or
// leaves a session's held requests rewrites this value, and a list made
// that O(held) per request (a session holding thousands cost the
// projection most of its CPU).
type SessionEscalations struct {
	Session  string `json:"session"`
	Count    int    `json:"count"`
	Critical int    `json:"critical,omitempty"`
	// Last is the id of the event that changed it last: a redelivered
	// event finds itself here and changes nothing.
	Last string `json:"last,omitempty"`
	// Listed is the list heed kept here before (one entry per held
	// request); a value still in that form is counted from it when next
	// written, and `heed replay --apply` rewrites it.
	Listed []HeldRef `json:"held,omitempty"`
}

// HeldRef is one held request in a session's value as heed wrote it
// before SessionEscalations counted them.
type HeldRef struct {
	ID       string  `json:"id"`
	Risk     float64 `json:"risk"`
	Critical bool    `json:"critical,omitempty"`
}

// Counted is the value with a list written before counted: Count and
// Critical from the list, the list dropped.
func (se SessionEscalations) Counted() SessionEscalations {
	if len(se.Listed) == 0 {
		return se
	}
	se.Count, se.Critical = len(se.Listed), 0
	for _, h := range se.Listed {
		if h.Critical {
			se.Critical++
		}
	}
	se.Listed = nil
	return se
}
