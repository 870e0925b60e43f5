// Package readmodel is the read side of heed's contract: the KV buckets
// that projections keep from the log, their key formats and the types of
// their values. Services read learned state through these types, and so do
// the CLI, the console, the bridges and any client in any language (`nats
// kv get heed_fixes <fix-id>`). Which service writes which bucket, and how,
// is the writer's business; the shape of what it writes is this package's.
//
// Every value is stored in an envelope, {"seq": N, "value": {...}}: seq is
// the log position of the last event that wrote it. A deleted key is
// purged (older buckets may hold {"seq": N, "deleted": true} tombstones,
// which Decode reads as absent). Read values with Decode.
package readmodel

import (
	"encoding/json"

	"github.com/heedhq/heed/events"
)

// Bucket names.
const (
	IndexBucket       = "heed_index"       // indexer: one entry per aggregate
	PrefsBucket       = "heed_prefs"       // learner: remembered choices
	FixesBucket       = "heed_fixes"       // learner: learned fixes
	StatsBucket       = "heed_stats"       // learner: failure statistics
	DecisionsBucket   = "heed_decisions"   // learner: decision statistics per operation and scope
	PatternsBucket    = "heed_patterns"    // learner: usage patterns of tool failures
	EscalationsBucket = "heed_escalations" // escalator: escalations and each session's count of held requests
)

// IndexConsumer is the indexer's durable consumer on the event stream: its
// acknowledged position is how far heed_index is up to date.
const IndexConsumer = "proj-index"

// BucketInfo describes one bucket for provisioning and the docs.
type BucketInfo struct {
	events.BucketSpec
	Writer string // the service that writes it
	Key    string // the key format
}

var buckets = []BucketInfo{
	{events.BucketSpec{Name: IndexBucket, Description: "heed index: aggregate id → kind, first and last event, status, count"}, "indexer", "`<kind>.<aggregate-id>` (`run.<run-id>`, `confirm.<confirm-id>`, `escalation.<esc-id>`, `pref.<pref-id>`, `fix.<fix-id>`)"},
	{events.BucketSpec{Name: PrefsBucket, Description: "heed learned preferences: remembered choices by skill step or error"}, "learner", "`<pref-id>` (`pref-` + 20 hex, see events.PrefID)"},
	{events.BucketSpec{Name: FixesBucket, Description: "heed learned fixes: tool + error signature → fix, with confidence"}, "learner", "`<fix-id>` (`fix-` + 20 hex, see events.FixID)"},
	{events.BucketSpec{Name: StatsBucket, Description: "heed failure statistics: totals, by type, per day and week, auto-fix rate"}, "learner", "`failures`; `escalations` (requested, routed, decided, escalated, avoided; see EscalationStatsKey)"},
	{events.BucketSpec{Name: DecisionsBucket, Description: "heed decision cache per operation and scope"}, "learner", "`op.<operation>.<scope>` (skill steps, see DecisionKey), `op.<operation>.<environment>.<scope>` (escalations naming an environment, see EscalationDecisionKey); `req.<confirm-id>`, `run.<run-id>` and `esc.<esc-id>` hold the learner's working state"},
	{events.BucketSpec{Name: EscalationsBucket, Description: "heed escalations: each request's summary and status, each session's count of held requests"}, "escalator", "`esc.<esc-id>` (see EscalationKey); `session.<token>` counts a session's held requests and the critical ones among them (see SessionKey, token = events.Token(session))"},
	{events.BucketSpec{Name: ChangeSetsBucket, Description: "heed change sets: each set's items and decisions, each agent's recent decisions and counts per tool"}, "changesets", "`set.<set-id>` (see ChangeSetKey); `agent.<token>` an agent's recent decisions, `stats.<token>` its counts per tool (token = events.Token(agent))"},
	{events.BucketSpec{Name: PatternsBucket, Description: "heed usage patterns: recurring failures by tool, error and call shape"}, "learner", "`<pattern-id>` (`pat-` + 20 hex); `tool.<tool>` lists a tool's patterns; `call.<run-id>` holds the shapes of a run's calls until their results (removed with the last result, or when the run ends)"},
}

// Buckets lists every read-model bucket.
func Buckets() []BucketInfo { return append([]BucketInfo(nil), buckets...) }

// Specs are the bucket specs to provision; a service provisions the
// buckets it reads (provisioning is idempotent), so it starts whichever
// service comes up first.
func Specs(names ...string) []events.BucketSpec {
	var out []events.BucketSpec
	for _, b := range buckets {
		if len(names) == 0 {
			out = append(out, b.BucketSpec)
			continue
		}
		for _, n := range names {
			if n == b.Name {
				out = append(out, b.BucketSpec)
			}
		}
	}
	return out
}

// Decode reads a stored value into v. It reports false for a deleted key
// or a value that is not an envelope of v's shape.
func Decode(b []byte, v any) bool {
	var env struct {
		Deleted bool            `json:"deleted"`
		Value   json.RawMessage `json:"value"`
	}
	if json.Unmarshal(b, &env) != nil || env.Deleted || len(env.Value) == 0 {
		return false
	}
	return json.Unmarshal(env.Value, v) == nil
}
