package events

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Change-set payloads (heed.changeset.<set-id>.<verb>); docs/CHANGESETS.md
// tells the story, schemas/events/heed.changeset.*.json the exact shape.
//
// A change set is what one agent wake (or one run) proposes that a person
// should agree to: calls of deferred tools, one item each (a batch tool's
// call exploded into one item per element). Each item is confirmed,
// rejected (with a reason) or deferred; the first valid decision of an item
// in log order takes effect. Confirmed items are applied by the runner.

// MaxChangeItems is the most items one change set holds. A proposal with
// more is split into parts of at most this many (ChangeSetPartID), each a
// set of its own, proposed together: nothing is applied without review.
const MaxChangeItems = 10

// DefaultChangeSetExpiry is how long a pending set waits for decisions.
const DefaultChangeSetExpiry = 7 * 24 * time.Hour

// ChangeItem is one proposed mutation: a call of a deferred tool.
type ChangeItem struct {
	// Item is the item's number in its set, from 1.
	Item    int            `json:"item"`
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args"`
	Summary string         `json:"summary"`
	// Before is what the agent saw of what the item changes (the left
	// side of a before → after preview); a tool's check compares it with
	// the current state before the item is applied.
	Before map[string]any `json:"before,omitempty"`
	// From names the batch tool the item was exploded from.
	From string `json:"from,omitempty"`
	// Group is a heading to show the item under (the tool's group, or
	// the batch tool's name).
	Group         string `json:"group,omitempty"`
	ArgsTruncated bool   `json:"args_truncated,omitempty"`
}

// ChangeSetProposedData is heed.changeset.proposed.
type ChangeSetProposedData struct {
	Agent string `json:"agent"`
	// Subject is what the agent works on: a task, a ticket, a repository.
	Subject string `json:"subject"`
	// Wake names the agent wake that proposed it (a run's id for a run).
	Wake  string       `json:"wake,omitempty"`
	RunID string       `json:"run_id,omitempty"`
	Title string       `json:"title,omitempty"`
	Items []ChangeItem `json:"items"`
	// ExpiresAt is when the items still pending expire ("no decision").
	ExpiresAt time.Time `json:"expires_at"`
	// Part and Parts number the sets of one proposal that had more than
	// MaxChangeItems items (absent for a proposal of one set); Related
	// names the other parts.
	Part    int      `json:"part,omitempty"`
	Parts   int      `json:"parts,omitempty"`
	Related []string `json:"related,omitempty"`
	// Reviewers, when set, are who may decide; anyone may otherwise.
	Reviewers  []string `json:"reviewers,omitempty"`
	ProposedBy string   `json:"proposed_by"`
}

// Verdicts of a decision on an item.
const (
	VerdictConfirmed = "confirmed"
	VerdictRejected  = "rejected"
	VerdictDeferred  = "deferred"
)

// Statuses of an item (a verdict, pending, or expired: no decision) and
// of a set.
const (
	ItemPending          = "pending"
	ItemExpired          = "expired"
	SetPending           = "pending"
	SetPartiallyResolved = "partially_resolved"
	SetResolved          = "resolved"
	SetExpired           = "expired"
)

// How far a confirmed item got (ChangeItemState.Apply).
const (
	ApplyApplying = "applying"
	ApplyApplied  = "applied"
	ApplyFailed   = "failed"
)

// ChangeDecision is a verdict on one item.
type ChangeDecision struct {
	Item    int    `json:"item"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
}

// ChangeSetDecidedData is heed.changeset.decided: one person's verdicts on
// one or more items at once (confirm all is one event). Each item's first
// valid decision in log order takes effect.
type ChangeSetDecidedData struct {
	Decisions []ChangeDecision `json:"decisions"`
	By        string           `json:"by"`
	Channel   string           `json:"channel,omitempty"`
	// All says the decisions were "confirm all" (every pending item).
	All bool `json:"all,omitempty"`
}

// ChangeApplyStartedData is heed.changeset.apply.started: the runner
// calls the item's tool (after its check, if the tool has one) with
// IdempotencyKey; a crash before the result calls it again with the same
// key.
type ChangeApplyStartedData struct {
	Item           int            `json:"item"`
	Tool           string         `json:"tool"`
	Args           map[string]any `json:"args,omitempty"`
	ArgsTruncated  bool           `json:"args_truncated,omitempty"`
	IdempotencyKey string         `json:"idempotency_key"`
	Attempt        int            `json:"attempt"`
}

// ChangeApplyCompletedData is heed.changeset.apply.completed.
type ChangeApplyCompletedData struct {
	Item            int     `json:"item"`
	Attempt         int     `json:"attempt"`
	Output          any     `json:"output,omitempty"`
	OutputTruncated bool    `json:"output_truncated,omitempty"`
	DurationMS      float64 `json:"duration_ms"`
}

// ChangeApplyFailedData is heed.changeset.apply.failed. Stale: the tool's
// check found that what the item changes has changed since it was
// proposed, and the item was not applied.
type ChangeApplyFailedData struct {
	Item       int       `json:"item"`
	Attempt    int       `json:"attempt"`
	Error      ErrorInfo `json:"error"`
	Stale      bool      `json:"stale,omitempty"`
	DurationMS float64   `json:"duration_ms"`
}

// ChangeSetExpiredData is heed.changeset.expired: the set's time ran out;
// Items are the items that were still pending (now "no decision").
type ChangeSetExpiredData struct {
	Items     []int     `json:"items"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ChangeDecisionRef names the decision that took effect on an item.
type ChangeDecisionRef struct {
	EventID string    `json:"event_id"`
	Verdict string    `json:"verdict"`
	By      string    `json:"by"`
	Channel string    `json:"channel,omitempty"`
	At      time.Time `json:"at"`
}

// Why a decision on an item did not take effect (ChangeRefusal.Code).
const (
	ChangeRefusedDecided    = "already_decided" // the item has a decision already (Winner)
	ChangeRefusedExpired    = "expired"         // the set expired first
	ChangeRefusedNoItem     = "no_such_item"    // the set has no item of that number
	ChangeRefusedNotAllowed = "not_allowed"     // the decider is not one of the set's reviewers
	ChangeRefusedNoProposal = "no_proposal"     // the decision came before any proposal of the set
)

// ChangeRefusal is one decision of a decided event that did not take
// effect.
type ChangeRefusal struct {
	Item    int                `json:"item"`
	Verdict string             `json:"verdict"`
	Code    string             `json:"code"`
	Reason  string             `json:"reason"`
	Winner  *ChangeDecisionRef `json:"winner,omitempty"`
}

// ChangeSetRefusedData is heed.changeset.refused: decisions written
// straight to the log that did not take effect, and why.
type ChangeSetRefusedData struct {
	DecisionID  string          `json:"decision_id"`
	DecisionSeq uint64          `json:"decision_seq"`
	By          string          `json:"by"`
	Channel     string          `json:"channel,omitempty"`
	Refused     []ChangeRefusal `json:"refused"`
}

// ChangeSetPartID is the id of part n (from 1) of a proposal with id
// base: the base itself for part 1, <base>-p<n> after it.
func ChangeSetPartID(base string, n int) string {
	if n <= 1 {
		return base
	}
	return fmt.Sprintf("%s-p%d", base, n)
}

// RunChangeSetID is the base id of the change set a run's deferred tool
// calls are gathered into: <run-id>-cs.
func RunChangeSetID(runID string) string { return runID + "-cs" }

// RunChangeSetRoundID is the base id of the change set of a run's round
// (from 1): the run's deferred calls until it first ends are round 1,
// <run-id>-cs; a failed run that a retry reopens gathers the calls it
// queues after that into round 2, <run-id>-cs-r2, and so on. Each end
// proposes its round's calls, and a proposed set takes no more.
func RunChangeSetRoundID(runID string, round int) string {
	if round <= 1 {
		return RunChangeSetID(runID)
	}
	return fmt.Sprintf("%s-r%d", RunChangeSetID(runID), round)
}

// InChangeSet reports whether set is base or one of its parts
// (ChangeSetPartID).
func InChangeSet(set, base string) bool {
	if set == base {
		return true
	}
	n, ok := strings.CutPrefix(set, base+"-p")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ChangeItemID names one item: <set-id>/<item>.
func ChangeItemID(setID string, item int) string { return setID + "/" + strconv.Itoa(item) }

// ParseChangeItemID reverses ChangeItemID.
func ParseChangeItemID(s string) (setID string, item int, ok bool) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 || !ValidID(s[:i]) {
		return "", 0, false
	}
	return s[:i], n, true
}

// ChangeIdempotencyKey is the key an item's tool is applied with:
// changeset/<set-id>/<item>. A crash during the call makes the runner call
// again with the same key.
func ChangeIdempotencyKey(setID string, item int) string {
	return "changeset/" + setID + "/" + strconv.Itoa(item)
}
