package learner_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/services/learner"
)

// TestLearnedStateStaysBounded: what anyone who may write a run's events
// can flood the log with does not grow a learned value without end. Made-
// up failure kinds count as "other" past 32 (17,000 of them grew the stats
// value past a NATS message, and every later write failed); a tool keeps
// at most 64 failure patterns, the least seen leaving (40,000 arg shapes
// made each success of the tool read them all); weeks older than two
// years leave the weekly figures; an event dated in the past does not
// move a pattern's last sighting back.
func TestLearnedStateStaysBounded(t *testing.T) {
	stats, s := learner.StatsProjection{}, mapStore{}
	for i := range 100 {
		apply(t, stats, s, events.HealTriggered, fmt.Sprintf("kd-%d", i), time.Duration(i)*time.Second, events.HealTriggeredData{Step: "x", Index: 0, Attempt: 1, Tool: "t",
			Error: events.ErrorInfo{Message: "boom"}, Classification: events.Classification{Kind: fmt.Sprintf("kind-%03d-%s", i, strings.Repeat("k", 50))}, Plan: "agent", HealAttempt: 1})
	}
	for i := range 300 {
		apply(t, stats, s, events.RunStepFailed, "weeks", -time.Duration(i)*7*24*time.Hour, events.StepFailedData{Step: "x", Index: 0, Attempt: 1, Tool: "t", Error: events.ErrorInfo{Message: "boom"}})
	}
	var st readmodel.FailureStats
	if _, err := s.Get(context.Background(), readmodel.StatsKey, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.ByType) > 33 || st.ByType[learner.OtherKind] != 100-32 {
		t.Fatalf("by_type holds %d kinds, other %d", len(st.ByType), st.ByType[learner.OtherKind])
	}
	if len(st.Weekly) > 106 {
		t.Fatalf("weekly holds %d weeks", len(st.Weekly))
	}

	patterns, ps := learner.PatternsProjection{}, mapStore{}
	fail := func(run string, at time.Duration, args map[string]any) {
		t.Helper()
		apply(t, patterns, ps, events.RunStepFailed, run, at, events.StepFailedData{Step: "x", Index: 0, Attempt: 1, Tool: "floodtool", Args: args,
			Error: events.ErrorInfo{Message: "invalid value", Kind: "exit"}})
	}
	for range 3 {
		fail("real", 0, map[string]any{"replicas": 12}) // seen often: kept
	}
	for i := range 200 {
		fail(fmt.Sprintf("fl-%d", i), time.Duration(i+1)*time.Second, map[string]any{fmt.Sprintf("arg%d", i): "x"})
	}
	var n int
	for k := range ps {
		if strings.HasPrefix(k, "pat") || (!strings.HasPrefix(k, "tool.") && !strings.HasPrefix(k, "call.")) {
			n++
		}
	}
	if n > 64 {
		t.Fatalf("%d patterns kept for one tool", n)
	}
	var idx struct{ IDs []string }
	if _, err := ps.Get(context.Background(), "tool.floodtool", &idx); err != nil || len(idx.IDs) > 64 {
		t.Fatalf("the tool's index holds %d ids (%v)", len(idx.IDs), err)
	}
	realID := learner.PatternID("floodtool", events.ErrorSignature("invalid value"), readmodel.Shapes(map[string]any{"replicas": 12}))
	var p readmodel.Pattern
	if ok, _ := ps.Get(context.Background(), realID, &p); !ok || p.Occurrences != 3 {
		t.Fatalf("the often-seen pattern left: %v %+v", ok, p)
	}
	fail("real", -24*time.Hour*365*20, map[string]any{"replicas": 12}) // dated 20 years back
	if _, err := ps.Get(context.Background(), realID, &p); err != nil || p.LastSeen.Before(t0) || p.LastSeen.Before(p.FirstSeen) {
		t.Fatalf("a backdated failure moved last_seen back: %+v", p)
	}
}

// TestRefusedFixIsNotCounted: heed stats counts no fix the fixes
// projection refuses (a patch that could never apply).
func TestRefusedFixIsNotCounted(t *testing.T) {
	stats, s := learner.StatsProjection{}, mapStore{}
	apply(t, stats, s, events.FixLearned, "fix-bad", 0, events.FixLearnedData{Tool: "t", ErrorPattern: "x", Source: events.FixFromAgent, ArgsPatch: map[string]any{"tag": "{{ nope( }}"}})
	apply(t, stats, s, events.FixLearned, "fix-good", time.Second, events.FixLearnedData{Tool: "t", ErrorPattern: "x", Source: events.FixFromAgent, ArgsPatch: map[string]any{"tag": "v2"}})
	var st readmodel.FailureStats
	if _, err := s.Get(context.Background(), readmodel.StatsKey, &st); err != nil || st.FixesLearned != 1 {
		t.Fatalf("fixes learned %d (%v), want 1", st.FixesLearned, err)
	}
}
