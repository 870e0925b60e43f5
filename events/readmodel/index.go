package readmodel

import (
	"context"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/nats-io/nats.go/jetstream"
)

// IndexKey is the heed_index key of an aggregate.
func IndexKey(kind, id string) string { return kind + "." + id }

// IndexTally reads how many events the index has folded for an aggregate
// and the id of the last of them (its entry's Count and Last.ID), with one
// direct get of the entry. An aggregate the index does not know (yet, or
// any more) is 0 and "". What the index has folded may lag the log: a
// reader compares it with what it read from the log, never trusts it
// alone.
func IndexTally(ctx context.Context, js jetstream.JetStream, kind, id string) (count int, lastID string, err error) {
	raw, err := events.LastOf(ctx, js, "KV_"+IndexBucket, "$KV."+IndexBucket+"."+IndexKey(kind, id))
	if err != nil || raw == nil {
		return 0, "", err
	}
	var e IndexEntry
	if !Decode(raw.Data, &e) {
		return 0, "", nil // deleted or purged: its KV-Operation marker
	}
	return e.Count, e.Last.ID, nil
}

// EventRef points at one event in the log.
type EventRef struct {
	ID   string    `json:"id"`
	Type string    `json:"type"`
	Time time.Time `json:"time"`
}

// IndexEntry is the index's view of one aggregate (a run, a confirmation,
// a preference, a fix).
type IndexEntry struct {
	ID     string   `json:"id"`
	Kind   string   `json:"kind"`
	Status string   `json:"status"`
	Count  int      `json:"count"`
	First  EventRef `json:"first"`
	Last   EventRef `json:"last"`
	// Run fields.
	Skill  string `json:"skill,omitempty"`
	Driver string `json:"driver,omitempty"`
	Step   string `json:"step,omitempty"` // the step last reported
	// Confirmation fields: the question's options and default, and the one
	// answer that took effect (the first valid one in log order; see
	// docs/EVENTS.md). Refused counts answers that did not.
	RunID    string   `json:"run_id,omitempty"`
	Options  []string `json:"options,omitempty"`
	Default  string   `json:"default,omitempty"`
	Choice   string   `json:"choice,omitempty"`
	Method   string   `json:"method,omitempty"`
	By       string   `json:"by,omitempty"`
	Channel  string   `json:"channel,omitempty"`
	AnswerID string   `json:"answer_id,omitempty"`
	Refused  int      `json:"refused,omitempty"`
	// Who may answer and the quorum, as the request names them, and the
	// votes counted so far (partial approvals are visible).
	Approvers []string       `json:"approvers,omitempty"`
	Quorum    *events.Quorum `json:"quorum,omitempty"`
	Votes     []command.Vote `json:"votes,omitempty"`
	// Escalation fields (status held, approved or denied): the request,
	// its routing, the current or last offer (ConfirmID, Tier), how it
	// was decided (Method, By, Channel) and the reported outcome.
	Session         string   `json:"session,omitempty"`
	Operation       string   `json:"operation,omitempty"`
	Scope           string   `json:"scope,omitempty"`
	Risk            *float64 `json:"risk,omitempty"`
	Critical        bool     `json:"critical,omitempty"`
	Route           string   `json:"route,omitempty"`
	Priority        int      `json:"priority,omitempty"`
	Tier            string   `json:"tier,omitempty"`
	ConfirmID       string   `json:"confirm_id,omitempty"`
	EscalationCount int      `json:"escalation_count,omitempty"`
	Outcome         string   `json:"outcome,omitempty"`
}

// Index statuses. Runs: requested, running, paused, completed, failed,
// cancelled, abandoned. Confirmations: pending, delegated, expired, answered.
// Escalations: held, approved, denied (events.EscalationHeld, ...).
// Preferences and fixes: active, forgotten.
const (
	StatusPending   = "pending"
	StatusDelegated = "delegated"
	StatusExpired   = "expired"
	StatusAnswered  = "answered"
)

// Terminal reports whether the aggregate has finished.
func (e IndexEntry) Terminal() bool {
	switch e.Status {
	case "completed", "failed", "cancelled", "abandoned", StatusAnswered, events.EscalationApproved, events.EscalationDenied:
		return true
	}
	return false
}

// Open reports whether a confirmation still waits for its answer.
func (e IndexEntry) Open() bool {
	return e.Kind == "confirm" && (e.Status == StatusPending || e.Status == StatusDelegated || e.Status == StatusExpired)
}
