package runner

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// Bounds on what the learned state adds to a run's events.
const (
	maxKnownIssues = 20
	maxWarnings    = 3
)

// bucketLearned is the learned state as the learner's buckets hold it,
// watched into memory.
type bucketLearned struct {
	fixes, patterns *events.BucketCache
}

// KnownIssues are the usable learned fixes for the tools, by fix id.
func (b bucketLearned) KnownIssues(tools []string) []events.KnownIssue {
	want := map[string]bool{}
	for _, t := range tools {
		want[t] = true
	}
	var out []events.KnownIssue
	b.fixes.Each(func(_ string, v json.RawMessage) bool {
		var f readmodel.Fix
		if json.Unmarshal(v, &f) == nil && want[f.Tool] && f.Usable() {
			out = append(out, events.KnownIssue{Tool: f.Tool, Pattern: f.ErrorPattern, Description: f.Description, FixID: f.ID, Confidence: f.Confidence})
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].FixID < out[j].FixID })
	return out[:min(len(out), maxKnownIssues)]
}

// Warnings are the active usage patterns a call matches, by pattern id.
func (b bucketLearned) Warnings(toolName string, args map[string]any, now time.Time) []events.RunWarningData {
	var out []events.RunWarningData
	b.patterns.Each(func(_ string, v json.RawMessage) bool {
		var p readmodel.Pattern
		if json.Unmarshal(v, &p) != nil || p.Tool != toolName || p.Kind != "usage" || !p.Active(now, 0) || !p.Matches(args) {
			return true
		}
		out = append(out, events.RunWarningData{PatternID: p.ID, Message: p.Hint, Confidence: p.Confidence})
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].PatternID < out[j].PatternID })
	return out[:min(len(out), maxWarnings)]
}
