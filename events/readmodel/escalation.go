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

// HeldRef is one held request in a session's list.
type HeldRef struct {
	ID       string  `json:"id"`
	Risk     float64 `json:"risk"`
	Critical bool    `json:"critical,omitempty"`
}

// SessionEscalations are a session's held requests, oldest first
// (heed_escalations, key SessionKey; deleted when none is left).
type SessionEscalations struct {
	Session string    `json:"session"`
	Held    []HeldRef `json:"held"`
}
