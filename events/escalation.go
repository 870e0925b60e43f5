package events

import (
	"fmt"
	"strings"
	"time"
)

// Escalation payloads (heed.escalation.<esc-id>.<verb>); docs/ESCALATIONS.md
// tells the story, schemas/events/heed.escalation.*.json the exact shape.

// EscalationRequestedData is heed.escalation.requested: an agent session
// asks to do an operation. Risk and Confidence are optional: the
// escalator's risk rules score a request that comes without them.
type EscalationRequestedData struct {
	Session     string   `json:"session"`
	Operation   string   `json:"operation"`
	Scope       string   `json:"scope,omitempty"`
	Environment string   `json:"environment,omitempty"`
	Risk        *float64 `json:"risk,omitempty"`
	Confidence  *float64 `json:"confidence,omitempty"`
	Title       string   `json:"title,omitempty"`
	Message     string   `json:"message,omitempty"`
	// Approvers, when set, is who may approve: each tier's members are
	// narrowed to them (a tier left with nobody is unreachable).
	Approvers []string `json:"approvers,omitempty"`
	// Quorum, when set, applies to every offer (a stricter rule's wins).
	Quorum    *Quorum        `json:"quorum,omitempty"`
	Requester string         `json:"requester"`
	RunID     string         `json:"run_id,omitempty"`
	Context   map[string]any `json:"context,omitempty"`
}

// Routing decisions (EscalationRoutedData.Decision).
const (
	RouteAutoApprove        = "auto_approve"
	RouteConditionalApprove = "conditional_approve"
	RouteCachedApprove      = "cached_approve"
	RouteEscalate           = "escalate"
	RouteDeny               = "deny"
)

// Where a request's risk came from (EscalationRoutedData.RiskSource).
const (
	RiskFromRequest = "request"
	RiskFromRule    = "rule"
	RiskDefault     = "default"
)

// CriticalRisk: a risk above it is critical (never cached, top tier,
// blocks the session's new risky work while held).
const CriticalRisk = 0.9

// Safeguards come with a conditional (or cached) approval: what the agent
// must do while it acts.
type Safeguards struct {
	LogExtra bool   `json:"log_extra,omitempty"`
	Monitor  bool   `json:"monitor,omitempty"`
	Sandbox  bool   `json:"sandbox,omitempty"`
	Rollback bool   `json:"rollback,omitempty"`
	Notes    string `json:"notes,omitempty"`
}

// Any reports whether a safeguard is set.
func (s *Safeguards) Any() bool {
	return s != nil && (s.LogExtra || s.Monitor || s.Sandbox || s.Rollback || s.Notes != "")
}

// CacheEvidence is the learned record that approved a request
// (heed_decisions): how often the operation was decided, how it went.
type CacheEvidence struct {
	Count           int     `json:"count"`
	SuccessRate     float64 `json:"success_rate"`
	ConfidenceBoost float64 `json:"confidence_boost"`
}

// EscalationRoutedData is heed.escalation.routed: the decision with
// everything that explains it.
type EscalationRoutedData struct {
	Decision   string  `json:"decision"`
	Risk       float64 `json:"risk"`
	RiskSource string  `json:"risk_source"`
	RiskRule   string  `json:"risk_rule,omitempty"`
	// Confidence after any boost of the learned cache.
	Confidence float64 `json:"confidence"`
	Critical   bool    `json:"critical,omitempty"`
	// Rule names the routing or auto-approve rule that decided.
	Rule       string         `json:"rule,omitempty"`
	Reason     string         `json:"reason"`
	Priority   int            `json:"priority,omitempty"`
	Tier       string         `json:"tier,omitempty"`
	Safeguards *Safeguards    `json:"safeguards,omitempty"`
	Cache      *CacheEvidence `json:"cache,omitempty"`
	Quorum     *Quorum        `json:"quorum,omitempty"`
}

// EscalationOfferedData is heed.escalation.offered: the request became the
// confirmation ConfirmID for a tier's members until Deadline.
type EscalationOfferedData struct {
	Tier            string    `json:"tier"`
	TierIndex       int       `json:"tier_index"`
	Offer           int       `json:"offer"`
	ConfirmID       string    `json:"confirm_id"`
	Members         []string  `json:"members,omitempty"`
	Deadline        time.Time `json:"deadline"`
	TimeoutS        float64   `json:"timeout_s"`
	EscalationCount int       `json:"escalation_count"`
	Priority        int       `json:"priority,omitempty"`
	Quorum          *Quorum   `json:"quorum,omitempty"`
}

// Why a request moved past a tier (EscalationEscalatedData.Reason).
const (
	EscalateTimeout     = "timeout"
	EscalateUnreachable = "unreachable"
	EscalatePassed      = "passed"
)

// EscalationEscalatedData is heed.escalation.escalated. ToTier is empty
// when no tier is left and the final action applies.
type EscalationEscalatedData struct {
	FromTier        string `json:"from_tier"`
	ToTier          string `json:"to_tier,omitempty"`
	EscalationCount int    `json:"escalation_count"`
	Reason          string `json:"reason"`
	Detail          string `json:"detail,omitempty"`
	// ConfirmID is the offer that timed out or was passed on.
	ConfirmID string `json:"confirm_id,omitempty"`
	// Tried are the members asked for presence (unreachable).
	Tried []string `json:"tried,omitempty"`
	By    string   `json:"by,omitempty"`
}

// Decisions (EscalationDecidedData.Decision) and escalation status.
const (
	EscalationApproved = "approved"
	EscalationDenied   = "denied"
	EscalationHeld     = "held"
)

// How an escalation was decided (EscalationDecidedData.Method); a person's
// answer is MethodUser.
const (
	EscMethodRule        = "rule"
	EscMethodCache       = "cache"
	EscMethodFinalAction = "final_action"
)

// EscalationVote is one counted vote of a quorum.
type EscalationVote struct {
	Choice  string    `json:"choice"`
	By      string    `json:"by"`
	Channel string    `json:"channel,omitempty"`
	At      time.Time `json:"at,omitzero"`
}

// EscalationDecidedData is heed.escalation.decided: the event the agent
// waits for. Operation, Scope and Environment repeat the request's, for
// the learner.
type EscalationDecidedData struct {
	Decision    string           `json:"decision"`
	Method      string           `json:"method"`
	By          string           `json:"by"`
	Channel     string           `json:"channel,omitempty"`
	ConfirmID   string           `json:"confirm_id,omitempty"`
	Tier        string           `json:"tier,omitempty"`
	Votes       []EscalationVote `json:"votes,omitempty"`
	Safeguards  *Safeguards      `json:"safeguards,omitempty"`
	Reason      string           `json:"reason,omitempty"`
	HeldMS      float64          `json:"held_ms"`
	Operation   string           `json:"operation"`
	Scope       string           `json:"scope,omitempty"`
	Environment string           `json:"environment,omitempty"`
	Critical    bool             `json:"critical,omitempty"`
}

// Outcomes an agent reports.
const (
	OutcomeSuccess = "success"
	OutcomeFailure = "failure"
)

// EscalationOutcomeData is heed.escalation.outcome: how the decided
// operation went. Operation, Scope, Environment and Decision repeat the
// escalation's, for the learner's cache.
type EscalationOutcomeData struct {
	Outcome     string `json:"outcome"`
	Detail      string `json:"detail,omitempty"`
	By          string `json:"by"`
	Operation   string `json:"operation"`
	Scope       string `json:"scope,omitempty"`
	Environment string `json:"environment,omitempty"`
	Decision    string `json:"decision"`
}

// ConfirmIDOfOffer is the confirmation id of offer n (1-based) of
// escalation escID: <esc-id>-o<n>.
func ConfirmIDOfOffer(escID string, n int) string { return fmt.Sprintf("%s-o%d", escID, n) }

// OfferOfConfirmID reverses ConfirmIDOfOffer: ok is false for a
// confirmation that is not an escalation's offer.
func OfferOfConfirmID(confirmID string) (escID string, n int, ok bool) {
	i := strings.LastIndex(confirmID, "-o")
	if i <= 0 || i+2 >= len(confirmID) {
		return "", 0, false
	}
	for _, c := range confirmID[i+2:] {
		if c < '0' || c > '9' {
			return "", 0, false
		}
		n = n*10 + int(c-'0')
		if n > 1_000_000 {
			return "", 0, false
		}
	}
	if n < 1 || confirmID[i+2] == '0' {
		return "", 0, false
	}
	return confirmID[:i], n, true
}

// Presence: a channel where a person is present answers core NATS requests
// on PresenceSubject(identity) with a PresenceReply (not stored). The
// escalator asks before it offers a tier; no responder for any member
// makes the tier unreachable.
const PresencePrefix = "heed.presence"

// PresenceSubject is heed.presence.<token>, token = Token(identity).
func PresenceSubject(identity string) string { return PresencePrefix + "." + Token(identity) }

// PresenceReply says where a person is present.
type PresenceReply struct {
	Identity string   `json:"identity"`
	Channels []string `json:"channels"`
}

// Token encodes any string as one subject token that is also a valid KV
// key: letters, digits, '-' and '_' stay, every other byte (of the UTF-8
// form) becomes '=' and two upper-case hex digits. It is reversible
// (ParseToken) and so collision-free: "user:alice" → "user=3Aalice".
func Token(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// ParseToken reverses Token.
func ParseToken(tok string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c != '=' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(tok) {
			return "", false
		}
		hi, ok1 := unhex(tok[i+1])
		lo, ok2 := unhex(tok[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	// Only Token's own form (upper-case hex, nothing escaped that need not be).
	if Token(b.String()) != tok {
		return "", false
	}
	return b.String(), true
}
