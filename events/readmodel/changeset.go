package readmodel

import (
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
)

// ChangeSetsBucket holds the change sets (docs/CHANGESETS.md).
const ChangeSetsBucket = "heed_changesets"

// ChangeSetKey is the heed_changesets key of a set: its folded state
// (command.ChangeSetState, Seq left at 0).
func ChangeSetKey(id string) string { return "set." + id }

// AgentDecisionsKey is the heed_changesets key of an agent's recent
// decisions (AgentDecisions).
func AgentDecisionsKey(agent string) string { return "agent." + events.Token(agent) }

// ChangeStatsKey is the heed_changesets key of an agent's decision counts
// per tool (ChangeStats).
func ChangeStatsKey(agent string) string { return "stats." + events.Token(agent) }

// MaxAgentDecisions bounds the decisions kept per agent (newest kept).
const MaxAgentDecisions = 200

// AgentDecisions is an agent's decided and expired items, oldest first,
// the newest MaxAgentDecisions of them: what decision_history reads.
type AgentDecisions struct {
	Agent     string                         `json:"agent"`
	Decisions []command.ChangeDecisionRecord `json:"decisions"`
}

// ToolDecisions counts what happened to an agent's items of one tool.
type ToolDecisions struct {
	Proposed  int `json:"proposed"`
	Confirmed int `json:"confirmed"`
	Rejected  int `json:"rejected"`
	Deferred  int `json:"deferred"`
	Expired   int `json:"expired"`
	Applied   int `json:"applied"`
	Failed    int `json:"failed"`
	Stale     int `json:"stale"`
	// RejectedStreak counts the rejections since the tool's last
	// confirmation: an agent that keeps proposing what is rejected.
	RejectedStreak int    `json:"rejected_streak"`
	LastReason     string `json:"last_reason,omitempty"`
}

// ChangeStats is an agent's decision counts per tool.
type ChangeStats struct {
	Agent string                   `json:"agent"`
	Tools map[string]ToolDecisions `json:"tools"`
}

// KeepsProposingRejected says whether an agent keeps proposing what is
// rejected: at least 3 rejections in a row since the tool's last
// confirmation.
func (t ToolDecisions) KeepsProposingRejected() bool { return t.RejectedStreak >= 3 }
