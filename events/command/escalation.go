package command

import (
	"time"

	"github.com/heedhq/heed/events"
)

// RequestEscalation asks for permission to do an operation
// (heed.cmd.escalation.request). ID is optional: a repeated request with
// the same id and content returns the existing escalation, with other
// content it is refused (conflict). Requester defaults to the session.
type RequestEscalation struct {
	ID string `json:"id,omitempty"`
	events.EscalationRequestedData
}

// EscalationOffer is where a held request waits: the tier, the
// confirmation its members answer, and when it moves on.
type EscalationOffer struct {
	Tier      string    `json:"tier"`
	ConfirmID string    `json:"confirm_id"`
	Deadline  time.Time `json:"deadline"`
}

// EscalationReply answers a request at once: Status is held (wait for
// heed.escalation.<id>.decided), approved or denied (decided already, by a
// rule or the learned cache). Safeguards come with an approval that has
// them. Offer is absent unless the request is held by a tier.
type EscalationReply struct {
	ID         string                      `json:"id"`
	Status     string                      `json:"status"`
	Routed     events.EscalationRoutedData `json:"routed"`
	Safeguards *events.Safeguards          `json:"safeguards,omitempty"`
	Offer      *EscalationOffer            `json:"offer,omitempty"`
}

// EscalationStatusRequest asks for an escalation's state
// (heed.cmd.escalation.status).
type EscalationStatusRequest struct {
	ID string `json:"id"`
}

// EscalationState is an escalation folded from its events: the reply of
// heed.cmd.escalation.status and what client.WaitEscalation returns.
// Status is held until Decided.
type EscalationState struct {
	ID          string                           `json:"id"`
	Status      string                           `json:"status"`
	Request     events.EscalationRequestedData   `json:"request"`
	RequestedAt time.Time                        `json:"requested_at"`
	Routed      *events.EscalationRoutedData     `json:"routed,omitempty"`
	Offers      []events.EscalationOfferedData   `json:"offers,omitempty"`
	Escalations []events.EscalationEscalatedData `json:"escalations,omitempty"`
	Decided     *events.EscalationDecidedData    `json:"decided,omitempty"`
	DecidedAt   time.Time                        `json:"decided_at,omitzero"`
	Outcome     *events.EscalationOutcomeData    `json:"outcome,omitempty"`
	// Seq is the log position of the last event folded.
	Seq uint64 `json:"seq"`
}

// HeldRequest asks whether a session may start new risky work
// (heed.cmd.escalation.held); an empty Session asks about every session
// with held requests.
type HeldRequest struct {
	Session string `json:"session,omitempty"`
}

// HeldEscalation is one held request of a session.
type HeldEscalation struct {
	ID        string    `json:"id"`
	Operation string    `json:"operation"`
	Scope     string    `json:"scope,omitempty"`
	Risk      float64   `json:"risk"`
	Critical  bool      `json:"critical,omitempty"`
	Tier      string    `json:"tier,omitempty"`
	Priority  int       `json:"priority,omitempty"`
	Since     time.Time `json:"since"`
}

// SessionHeld is a session's held requests and the session rule's verdict:
// more than max_held held, or any critical held, and it may not start new
// risky work (CanContinue false, Reason says why).
type SessionHeld struct {
	Session     string `json:"session"`
	Held        int    `json:"held"`
	Critical    int    `json:"critical"`
	CanContinue bool   `json:"can_continue"`
	Reason      string `json:"reason"`
	// Requests are the oldest held requests, at most HeldRequestsLimit
	// for one session (none in the list of every session: ask for the
	// session); More counts the ones left out, so a reply stays well
	// under NATS's message size whatever is held.
	Requests []HeldEscalation `json:"requests"`
	More     int              `json:"more,omitempty"`
}

// Limits of a held reply.
const (
	HeldRequestsLimit = 100   // requests listed for one session
	HeldSessionsLimit = 1_000 // sessions listed when every session is asked for
)

// HeldReply answers heed.cmd.escalation.held: the session asked about
// (a session with nothing held may continue), or with an empty session
// every session with held requests in Sessions.
type HeldReply struct {
	SessionHeld
	Sessions []SessionHeld `json:"sessions,omitempty"`
	// MoreSessions counts sessions with held requests left out of
	// Sessions (past HeldSessionsLimit, those holding fewest).
	MoreSessions int `json:"more_sessions,omitempty"`
}

// ReportOutcome tells how a decided operation went
// (heed.cmd.escalation.outcome). By defaults to the session.
type ReportOutcome struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	By      string `json:"by,omitempty"`
}

// OutcomeReply names the event written.
type OutcomeReply struct {
	ID      string `json:"id"`
	EventID string `json:"event_id"`
}
