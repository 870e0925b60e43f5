package readmodel

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
)

// Pref is a remembered choice (heed_prefs, key: the preference id).
type Pref struct {
	ID           string    `json:"id"`
	Scope        string    `json:"scope"`
	Skill        string    `json:"skill,omitempty"`
	Step         string    `json:"step,omitempty"`
	Tool         string    `json:"tool,omitempty"`
	ErrorPattern string    `json:"error_pattern,omitempty"`
	Choice       string    `json:"choice"`
	By           string    `json:"by"`
	LearnedFrom  string    `json:"learned_from,omitempty"`
	ConfirmID    string    `json:"confirm_id,omitempty"`
	SetAt        time.Time `json:"set_at"`
}

// FixMinConfidence is the confidence below which the healer does not use
// a learned fix.
const FixMinConfidence = 0.3

// Fix is a learned fix with how it has fared (heed_fixes, key: the fix id).
type Fix struct {
	ID           string            `json:"id"`
	Tool         string            `json:"tool"`
	ErrorPattern string            `json:"error_pattern"`
	Match        string            `json:"match,omitempty"`
	RootCause    string            `json:"root_cause,omitempty"`
	Description  string            `json:"description"`
	Action       *events.FixAction `json:"action,omitempty"`
	ArgsPatch    map[string]any    `json:"args_patch,omitempty"`
	WhenWas      map[string]any    `json:"when_was,omitempty"`
	Source       string            `json:"source"`
	By           string            `json:"by,omitempty"`
	LearnedFrom  string            `json:"learned_from,omitempty"`
	RunID        string            `json:"run_id,omitempty"`
	Confidence   float64           `json:"confidence"`
	Healed       int               `json:"healed"`
	Failed       int               `json:"failed"`
	LearnedAt    time.Time         `json:"learned_at"`
	LastUsed     time.Time         `json:"last_used,omitempty"`
}

// Usable reports whether the healer may apply the fix.
func (f Fix) Usable() bool { return f.Confidence >= FixMinConfidence }

// Pattern lifecycle: confidence grows with each recurrence (new → low →
// medium → high), drops when the same call shape succeeds, and a pattern is
// active at ActiveConfidence and above until it has been quiet for the
// quiet period.
const (
	ActiveConfidence   = 0.7
	DefaultQuietPeriod = 30 * 24 * time.Hour
)

// PatternKeys is the KV key filter of heed_patterns' patterns alone: a
// pattern id ("pat-" and 20 hex) is one token, and the bucket's other keys
// (tool.<tool>, call.<run-id>) are two.
const PatternKeys = "*"

// Pattern is a recurring failure of a tool for calls of one shape
// (heed_patterns, key: the pattern id).
type Pattern struct {
	ID          string            `json:"id"`
	Tool        string            `json:"tool"`
	Signature   string            `json:"signature"`
	Kind        string            `json:"kind"` // usage (the call's args) or infrastructure
	ArgShapes   map[string]string `json:"arg_shapes"`
	Occurrences int               `json:"occurrences"`
	Successes   int               `json:"successes"`
	Confidence  float64           `json:"confidence"`
	Stage       string            `json:"stage"` // new, low, medium, high
	FirstSeen   time.Time         `json:"first_seen"`
	LastSeen    time.Time         `json:"last_seen"`
	Hint        string            `json:"hint"`
}

// Active reports whether the pattern should warn at now.
func (p Pattern) Active(now time.Time, quiet time.Duration) bool {
	if quiet <= 0 {
		quiet = DefaultQuietPeriod
	}
	return p.Confidence >= ActiveConfidence && now.Sub(p.LastSeen) <= quiet
}

// Matches reports whether a call with args has the pattern's shape.
func (p Pattern) Matches(args map[string]any) bool {
	for k, want := range p.ArgShapes {
		if Shape(args[k]) != want {
			return false
		}
	}
	return true
}

// Shapes describes each arg's shape.
func Shapes(args map[string]any) map[string]string {
	out := make(map[string]string, len(args))
	for k, v := range args {
		out[k] = Shape(v)
	}
	return out
}

// Shape is a coarse description of a value: what recurs across calls
// (a 7-character hex string), not the value itself.
func Shape(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case float64, int, int64, json.Number:
		return "number"
	case string:
		if x == "" {
			return "empty"
		}
		hexOnly, digits := true, true
		for _, r := range x {
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
				hexOnly = false
			}
			if !(r >= '0' && r <= '9') {
				digits = false
			}
		}
		switch {
		case digits:
			return "digits"
		case hexOnly:
			return fmt.Sprintf("hex%d", len(x))
		}
		return "text"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return "other"
}

// StatsKey is the heed_stats key of the failure statistics.
const StatsKey = "failures"

// Period counts failures in a day or week.
type Period struct {
	Total     int `json:"total"`
	AutoFixed int `json:"auto_fixed"`
}

// FailureStats are the tool failure statistics over every run.
type FailureStats struct {
	TotalFailures  int               `json:"total_failures"`
	AutoFixed      int               `json:"auto_fixed"`      // healed by a learned or generic fix, no person
	AgentFixed     int               `json:"agent_fixed"`     // healed by the agent's corrected retry
	ManualRequired int               `json:"manual_required"` // handed to the agent
	GaveUp         int               `json:"gave_up"`
	FixesLearned   int               `json:"fixes_learned"`
	ByType         map[string]int    `json:"by_type"`
	Daily          map[string]Period `json:"daily"`
	Weekly         map[string]Period `json:"weekly"`
	Last           time.Time         `json:"last"`
}

// AutoHealRate is the share of failures healed without anyone.
func (s FailureStats) AutoHealRate() float64 {
	if s.TotalFailures == 0 {
		return 0
	}
	return float64(s.AutoFixed) / float64(s.TotalFailures)
}

// SortedDays returns the days with daily figures, in date order.
func (s FailureStats) SortedDays() []string {
	out := make([]string, 0, len(s.Daily))
	for k := range s.Daily {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Decision is the cached record of one operation in heed_decisions: a
// skill step in one scope (the run's environment input, else "default"),
// or an escalated operation in one environment and scope.
type Decision struct {
	Operation string `json:"operation"`
	Scope     string `json:"scope"`
	// Environment: an escalation's (prod, stage); a record per
	// environment, so approvals on stage never approve the same operation
	// and scope in production. Empty for skill confirmations (their scope
	// is the run's environment).
	Environment string  `json:"environment,omitempty"`
	Count       int     `json:"count"`
	Approved    int     `json:"approved"`
	Denied      int     `json:"denied"`
	Successes   int     `json:"successes"`
	Failures    int     `json:"failures"`
	SuccessRate float64 `json:"success_rate"`
	// Candidate: more than 3 decisions and over 90% success, and over 90%
	// of the decisions approvals, and not Suspended: the escalator may
	// auto-approve, with ConfidenceBoost.
	Candidate       bool    `json:"auto_approve_candidate"`
	ConfidenceBoost float64 `json:"confidence_boost"`
	// CacheApproved counts the escalations the escalator approved from
	// this record (method cache): not decisions (Count), so that the
	// cache does not feed itself; their outcomes count.
	CacheApproved int `json:"cache_approved,omitempty"`
	// Suspended: a failure was reported; no candidate until a person
	// approves the operation again (docs/ESCALATIONS.md, "The learned
	// cache"). SuspendedAt is the failure's event time.
	Suspended   bool      `json:"suspended,omitempty"`
	SuspendedAt time.Time `json:"suspended_at,omitzero"`
}

// EscalationStatsKey is the heed_stats key of the escalation statistics.
const EscalationStatsKey = "escalations"

// EscalationPeriod counts escalations in a day.
type EscalationPeriod struct {
	Requested int `json:"requested"`
	Decided   int `json:"decided"`
	// Avoided: decided without a person (rule, conditional rule, cache).
	Avoided int `json:"avoided"`
}

// EscalationStats are the escalation statistics (heed_stats, key
// EscalationStatsKey), counted by the learner.
type EscalationStats struct {
	Requested int `json:"requested"`
	// Routed by decision: auto_approve, conditional_approve,
	// cached_approve, escalate, deny.
	Routed map[string]int `json:"routed"`
	// Decided by method: rule, cache, user, final_action.
	Decided  map[string]int `json:"decided"`
	Approved int            `json:"approved"`
	Denied   int            `json:"denied"`
	// Escalated by reason: timeout, unreachable, passed.
	Escalated map[string]int `json:"escalated"`
	// Avoided: decided without a person (rule, conditional rule, cache).
	Avoided   int                         `json:"avoided"`
	Successes int                         `json:"successes"`
	Failures  int                         `json:"failures"`
	Daily     map[string]EscalationPeriod `json:"daily"`
	Last      time.Time                   `json:"last"`
}

// AvoidedShare is the share of decided escalations decided without a
// person.
func (s EscalationStats) AvoidedShare() float64 {
	n := 0
	for _, v := range s.Decided {
		n += v
	}
	if n == 0 {
		return 0
	}
	return float64(s.Avoided) / float64(n)
}

// DecisionCacheKeys is the KV key filter of heed_decisions' decision
// cache alone (DecisionKey, EscalationDecisionKey): the bucket's other keys
// (req.<confirm-id>, one kept for every confirmation ever asked; run.<id>;
// esc.<id>) are the projection's own bookkeeping.
const DecisionCacheKeys = "op.>"

// DecisionKey is the heed_decisions key of an operation and scope.
func DecisionKey(operation, scope string) string {
	return "op." + keyToken(operation) + "." + keyToken(scope)
}

// keyToken is s as one token of a key, one to one, so that two
// operations, environments or scopes never share a record (wipe.db and
// wipe_db, a scope "*" and none): each '/'-separated part of s as
// events.Token gives it (letters, digits, '-' and '_' as they are, any
// other byte as =XX), the '/' kept (a skill step's operation, skill/step,
// reads as it is); an empty s (an escalation may name no scope) is "_",
// since a key may not end in a dot or hold two in a row, and a lone "_"
// is "=5F".
func keyToken(s string) string {
	switch s {
	case "":
		return "_"
	case "_":
		return "=5F"
	}
	parts := strings.Split(s, "/")
	for i, p := range parts {
		parts[i] = events.Token(p)
	}
	return strings.Join(parts, "/")
}

// EscalationDecisionKey is the heed_decisions key of an escalated
// operation and scope in an environment: op.<operation>.<environment>.<scope>
// (one token more than DecisionKey, so the two never meet), or DecisionKey
// when the request named no environment.
func EscalationDecisionKey(operation, environment, scope string) string {
	if environment == "" {
		return DecisionKey(operation, scope)
	}
	return "op." + keyToken(operation) + "." + keyToken(environment) + "." + keyToken(scope)
}
