package learner_test

// Unit checks of the learner's rules: error signatures, call shapes,
// pattern confidence, decision scoring and fix confidence. Projections are
// applied to an in-memory events.Store, event by event, as the projector
// does (the golden tests cover the same code against a real server).

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/services/learner"
)

// mapStore is a projection's store over a map.
type mapStore map[string]json.RawMessage

func (m mapStore) Get(_ context.Context, key string, v any) (bool, error) {
	b, ok := m[key]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(b, v)
}

func (m mapStore) Put(_ context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	m[key] = b
	return err
}

func (m mapStore) Delete(_ context.Context, key string) error {
	delete(m, key)
	return nil
}

var t0 = time.Date(2025, 3, 10, 9, 0, 0, 0, time.UTC)

// apply builds an event at t0+at and applies it to s with p.
func apply(t *testing.T, p events.Projection, s mapStore, typ events.Type, subject string, at time.Duration, data any) {
	t.Helper()
	source := "test"
	if d, ok := data.(events.ConfirmRequestedData); ok && d.Requester != "" {
		source = d.Requester // as in the log: the runner's requests are its own, a command's its caller's
	}
	ev, err := events.NewEvent(typ, subject, fmt.Sprintf("%s/%s/%d", subject, typ, len(s)), source, data)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetTime(t0.Add(at))
	if err := p.Apply(context.Background(), s, &ev); err != nil {
		t.Fatalf("apply %s: %v", typ, err)
	}
}

func TestErrorSignature(t *testing.T) {
	same := [][]string{
		{"manifest unknown: quay.io/x:abc1234", "manifest unknown: quay.io/x:def5678"},
		{"manifest unknown: quay.io/app-sre/backend:" + "0123456789abcdef0123456789abcdef01234567", "manifest unknown: quay.io/app-sre/backend:fedcba9876543210fedcba9876543210fedcba98"},
		{"dial tcp 10.0.0.1:6443: connect: no route to host", "dial tcp 192.168.7.20:443: connect: no route to host"},
		{`Error from server (NotFound): deployments.apps "api" not found`, `error from server (notfound): deployments.apps "worker-2" not found`},
		{"error: invalid replicas 'x'", "error: invalid replicas 'twelve'"},
		{"timeout after 30s", "  TIMEOUT   after 5s  "},
		{"first line 1\nstack trace 0x1234", "first line 2\nanother trace"},
	}
	for _, c := range same {
		a, b := events.ErrorSignature(c[0]), events.ErrorSignature(c[1])
		if a != b {
			t.Errorf("ErrorSignature(%q) = %q\nErrorSignature(%q) = %q\nwant the same", c[0], a, c[1], b)
		}
	}
	for msg, want := range map[string]string{
		"manifest unknown: quay.io/x:abc1234":                            "manifest unknown: quay.io/x:<h>",
		`Error from server (NotFound): deployments.apps "api" not found`: "error from server (notfound): deployments.apps <q> not found",
		"dial tcp 10.0.0.1:6443: connect: no route to host":              "dial tcp <n>.<n>.<n>.<n>:<n>: connect: no route to host",
		"error: You must be logged in to the server (Unauthorized)":      "error: you must be logged in to the server (unauthorized)",
	} {
		if got := events.ErrorSignature(msg); got != want {
			t.Errorf("ErrorSignature(%q) = %q, want %q", msg, got, want)
		}
	}
	different := [][]string{
		{"manifest unknown: quay.io/x:abc1234", "unauthorized: quay.io/x:abc1234"},
		{"connection refused", "connection reset by peer"},
		{`deployments.apps "api" not found`, `services "api" not found`},
		{"exit status 1", "exit status: permission denied"},
	}
	for _, c := range different {
		if a, b := events.ErrorSignature(c[0]), events.ErrorSignature(c[1]); a == b {
			t.Errorf("%q and %q share signature %q", c[0], c[1], a)
		}
	}
	long := events.ErrorSignature(strings.Repeat("word ", 100))
	if len(long) > 160 {
		t.Errorf("signature of a long message has %d bytes, want at most 160", len(long))
	}
}

func TestShape(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{nil, "null"}, {true, "bool"}, {float64(3), "number"}, {7, "number"}, {json.Number("1.5"), "number"},
		{"", "empty"}, {"12345", "digits"}, {"abc1234", "hex7"}, {"0123456789abcdef0123456789abcdef01234567", "hex40"},
		{"ABC1234", "text"}, {"api", "text"}, {"release-1.2", "text"},
		{[]any{1}, "list"}, {map[string]any{"a": 1}, "object"}, {struct{}{}, "other"},
	} {
		if got := readmodel.Shape(c.v); got != c.want {
			t.Errorf("Shape(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
	shapes := readmodel.Shapes(map[string]any{"tag": "abc1234", "replicas": float64(2)})
	if shapes["tag"] != "hex7" || shapes["replicas"] != "number" || len(shapes) != 2 {
		t.Errorf("Shapes = %v", shapes)
	}
	p := readmodel.Pattern{ArgShapes: map[string]string{"tag": "hex7"}}
	if !p.Matches(map[string]any{"tag": "def5678", "other": 1}) || p.Matches(map[string]any{"tag": "def5678" + "9"}) || p.Matches(nil) {
		t.Error("Pattern.Matches does not compare shapes")
	}
}

func TestPatternConfidence(t *testing.T) {
	p := learner.PatternsProjection{}
	s := mapStore{}
	bad := map[string]any{"tag": "abc1234"}
	fail := events.ErrorInfo{Message: "manifest unknown: quay.io/x:abc1234", Kind: "exit"}
	id := learner.PatternID("quay_check", events.ErrorSignature(fail.Message), readmodel.Shapes(bad))
	call := func(run string, at time.Duration, args map[string]any, failed bool) {
		t.Helper()
		apply(t, p, s, events.RunStepStarted, run, at, events.StepStartedData{Step: "check", Index: 0, Attempt: 1, Kind: "tool", Tool: "quay_check", Args: args})
		if failed {
			apply(t, p, s, events.RunStepFailed, run, at+time.Second, events.StepFailedData{Step: "check", Index: 0, Attempt: 1, Tool: "quay_check", Args: args, Error: fail})
		} else {
			apply(t, p, s, events.RunStepCompleted, run, at+time.Second, events.StepCompletedData{Step: "check", Index: 0, Attempt: 1})
		}
		if _, ok := s["call."+run]; ok {
			t.Errorf("the call's shape is kept after its result")
		}
	}
	get := func() readmodel.Pattern {
		t.Helper()
		var pat readmodel.Pattern
		if ok, _ := s.Get(context.Background(), id, &pat); !ok {
			t.Fatalf("no pattern %s; store: %v", id, keys(s))
		}
		return pat
	}
	// Each recurrence raises it: new → low → medium → high.
	stages := []struct {
		conf   float64
		stage  string
		active bool
	}{{0.2, "new", false}, {0.4, "low", false}, {0.55, "medium", false}, {0.75, "high", true}, {0.85, "high", true}, {0.85, "high", true}}
	for i, want := range stages {
		at := time.Duration(i) * time.Hour
		call(fmt.Sprintf("r%d", i), at, bad, true)
		pat := get()
		if pat.Occurrences != i+1 || pat.Confidence != want.conf || pat.Stage != want.stage || pat.Kind != "usage" {
			t.Errorf("after %d failures: %d occurrences, confidence %v, stage %s, kind %s; want %v %s usage", i+1, pat.Occurrences, pat.Confidence, pat.Stage, pat.Kind, want.conf, want.stage)
		}
		if got := pat.Active(t0.Add(at+time.Minute), 0); got != want.active {
			t.Errorf("after %d failures: active %v, want %v (threshold %v)", i+1, got, want.active, readmodel.ActiveConfidence)
		}
	}
	last := get()
	if !last.LastSeen.Equal(t0.Add(5*time.Hour+time.Second)) || !last.FirstSeen.Equal(t0.Add(time.Second)) {
		t.Errorf("first/last seen %s %s", last.FirstSeen, last.LastSeen)
	}
	if last.Hint == "" || last.ArgShapes["tag"] != "hex7" {
		t.Errorf("pattern %+v", last)
	}
	// Quiet period: active until it has been quiet longer than the period.
	if !last.Active(last.LastSeen.Add(readmodel.DefaultQuietPeriod), 0) || last.Active(last.LastSeen.Add(readmodel.DefaultQuietPeriod+time.Second), 0) {
		t.Error("default quiet period is not 30 days")
	}
	if !last.Active(last.LastSeen.Add(time.Hour), 2*time.Hour) || last.Active(last.LastSeen.Add(3*time.Hour), 2*time.Hour) {
		t.Error("a custom quiet period is not honoured")
	}

	// A success of another shape leaves it; one of the same shape lowers it.
	call("ok-other-shape", 10*time.Hour, map[string]any{"tag": "0123456789abcdef0123456789abcdef01234567"}, false)
	if pat := get(); pat.Successes != 0 || pat.Confidence != 0.85 {
		t.Errorf("a success of another shape changed the pattern: %+v", pat)
	}
	for i, want := range []struct {
		conf  float64
		stage string
	}{{0.7, "high"}, {0.55, "medium"}, {0.4, "low"}, {0.25, "new"}, {0.1, "new"}, {0, "new"}, {0, "new"}} {
		call(fmt.Sprintf("ok%d", i), time.Duration(11+i)*time.Hour, map[string]any{"tag": "fedcba9"}, false)
		pat := get()
		if pat.Successes != i+1 || pat.Confidence != want.conf || pat.Stage != want.stage {
			t.Errorf("after %d successes: confidence %v stage %s, want %v %s", i+1, pat.Confidence, pat.Stage, want.conf, want.stage)
		}
		if active := pat.Active(t0.Add(time.Duration(11+i)*time.Hour), 0); active != (want.conf >= readmodel.ActiveConfidence) {
			t.Errorf("after %d successes: active %v at confidence %v", i+1, active, pat.Confidence)
		}
	}

	// An infrastructure failure ignores the call's args and is not weakened
	// by successes of any shape.
	net := events.ErrorInfo{Message: "dial tcp 10.0.0.1:6443: connect: no route to host"}
	apply(t, p, s, events.RunStepStarted, "n1", 20*time.Hour, events.StepStartedData{Step: "get", Index: 0, Attempt: 1, Kind: "tool", Tool: "kube_get_deployment", Args: map[string]any{"name": "api"}})
	apply(t, p, s, events.RunStepFailed, "n1", 20*time.Hour, events.StepFailedData{Step: "get", Index: 0, Attempt: 1, Tool: "kube_get_deployment", Args: map[string]any{"name": "api"}, Error: net})
	apply(t, p, s, events.RunStepStarted, "n2", 21*time.Hour, events.StepStartedData{Step: "get", Index: 0, Attempt: 1, Kind: "tool", Tool: "kube_get_deployment", Args: map[string]any{"name": "api"}})
	apply(t, p, s, events.RunStepCompleted, "n2", 21*time.Hour, events.StepCompletedData{Step: "get", Index: 0, Attempt: 1})
	var infra readmodel.Pattern
	if ok, _ := s.Get(context.Background(), learner.PatternID("kube_get_deployment", events.ErrorSignature(net.Message), map[string]string{}), &infra); !ok {
		t.Fatalf("no infrastructure pattern; store: %v", keys(s))
	}
	if infra.Kind != "infrastructure" || len(infra.ArgShapes) != 0 || infra.Successes != 0 || infra.Confidence != 0.2 {
		t.Errorf("infrastructure pattern %+v", infra)
	}
	for msg, want := range map[events.ErrorInfo]string{
		{Message: "Unauthorized"}:                   "infrastructure",
		{Message: "i/o timeout"}:                    "infrastructure",
		{Message: "exit 1", Kind: "timeout"}:        "infrastructure",
		{Message: "manifest unknown"}:               "usage",
		{Message: `deployments.apps "x" not found`}: "usage",
	} {
		if got := learner.ClassifyUsage(msg); got != want {
			t.Errorf("ClassifyUsage(%+v) = %s, want %s", msg, got, want)
		}
	}
}

func TestDecisionScoring(t *testing.T) {
	p := learner.DecisionsProjection{}
	s := mapStore{}
	n := 0
	decide := func(skill, step, env, choice string, outcome events.Type) {
		t.Helper()
		n++
		run, cid := fmt.Sprintf("run%d", n), fmt.Sprintf("run%d-s1-a1", n)
		at := time.Duration(n) * time.Minute
		idx := 1
		apply(t, p, s, events.ConfirmRequested, cid, at, events.ConfirmRequestedData{Message: "go?", Options: []events.Option{{Label: "Go", Value: "proceed"}, {Label: "No", Value: "cancel"}},
			Requester: "heed/runner", RunID: run, Skill: skill, Step: step, Index: &idx, Context: map[string]any{"inputs": map[string]any{"environment": env}}})
		apply(t, p, s, events.ConfirmAnswered, cid, at+time.Second, events.ConfirmAnsweredData{Choice: choice, Method: events.MethodUser, By: "person/ana", RunID: run})
		if outcome != "" {
			apply(t, p, s, outcome, run, at+2*time.Second, map[string]any{})
		}
		if _, ok := s["run."+run]; ok && outcome != "" {
			t.Errorf("run %s still awaits its outcome after %s", run, outcome)
		}
		if b, ok := s["req."+cid]; ok && string(b) != `{"closed":true}` {
			t.Errorf("request %s kept after its answer as more than a closed marker: %s", cid, b)
		}
	}
	get := func(op, scope string) readmodel.Decision {
		t.Helper()
		var d readmodel.Decision
		if ok, _ := s.Get(context.Background(), readmodel.DecisionKey(op, scope), &d); !ok {
			t.Fatalf("no decision %s %s; store: %v", op, scope, keys(s))
		}
		return d
	}
	// Approved and successful: a candidate once the count passes 3, with a
	// boost of count*0.05 up to 0.3.
	for i := 1; i <= 8; i++ {
		decide("scale_down", "confirm_scale", "stage", "proceed", events.RunCompleted)
		d := get("scale_down/confirm_scale", "stage")
		wantBoost := 0.0
		if i > 3 {
			wantBoost = min(0.3, float64(i)*0.05)
		}
		if d.Count != i || d.Approved != i || d.Successes != i || d.SuccessRate != 1 || d.Candidate != (i > 3) || d.ConfidenceBoost != wantBoost {
			t.Errorf("after %d approvals: %+v; want candidate %v, boost %v", i, d, i > 3, wantBoost)
		}
	}
	if d := get("scale_down/confirm_scale", "stage"); d.ConfidenceBoost != 0.3 {
		t.Errorf("boost %v, want the cap 0.3", d.ConfidenceBoost)
	}
	// The scope is the run's environment; another scope is another record.
	decide("scale_down", "confirm_scale", "production", "proceed", events.RunCompleted)
	if d := get("scale_down/confirm_scale", "production"); d.Count != 1 || d.Candidate {
		t.Errorf("production: %+v", d)
	}
	// A success rate of exactly 0.9 is not over 0.9.
	for i := 0; i < 9; i++ {
		decide("release_prod", "confirm_release", "production", "proceed", events.RunCompleted)
	}
	decide("release_prod", "confirm_release", "production", "proceed", events.RunFailed)
	if d := get("release_prod/confirm_release", "production"); d.Count != 10 || d.Failures != 1 || d.SuccessRate != 0.9 || d.Candidate || d.ConfidenceBoost != 0 {
		t.Errorf("at 90%% success: %+v, want no candidate", d)
	}
	decide("release_prod", "confirm_release", "production", "proceed", events.RunCompleted)
	if d := get("release_prod/confirm_release", "production"); d.SuccessRate != 0.909 || !d.Candidate || d.ConfidenceBoost != 0.3 {
		t.Errorf("at 10/11 success: %+v, want a candidate", d)
	}
	// Denials count as decisions but never make a candidate for auto-approval.
	for i := 0; i < 5; i++ {
		decide("branch_cleanup", "confirm_delete", "", "cancel", events.RunCancelled)
	}
	if d := get("branch_cleanup/confirm_delete", "default"); d.Count != 5 || d.Denied != 5 || d.Approved != 0 || d.Candidate {
		t.Errorf("always denied: %+v, want no candidate", d)
	}
	// Approved but no outcome yet: no success or failure counted.
	decide("other", "ask", "", "proceed", "")
	if d := get("other/ask", "default"); d.Successes != 0 || d.Failures != 0 || d.SuccessRate != 1 {
		t.Errorf("no outcome yet: %+v", d)
	}
	if _, ok := s["run.run"+fmt.Sprint(n)]; !ok {
		t.Error("an approved run without an outcome is not remembered")
	}
	if readmodel.DecisionKey("a/b.c", "prod env") != "op.a/b=2Ec.prod=20env" {
		t.Errorf("DecisionKey = %s", readmodel.DecisionKey("a/b.c", "prod env"))
	}
}

func TestFixConfidence(t *testing.T) {
	p := learner.FixesProjection{}
	s := mapStore{}
	const id = "fix-0123456789abcdef0123"
	learn := func(source string, conf float64) {
		t.Helper()
		apply(t, p, s, events.FixLearned, id, 0, events.FixLearnedData{Tool: "quay_check", ErrorPattern: "manifest unknown: <h>", Description: "use the full sha",
			ArgsPatch: map[string]any{"tag": "{{ args.tag }}0"}, Source: source, Confidence: conf})
	}
	get := func() readmodel.Fix {
		t.Helper()
		var f readmodel.Fix
		if ok, _ := s.Get(context.Background(), id, &f); !ok {
			t.Fatalf("no fix %s", id)
		}
		return f
	}
	outcome := func(typ events.Type, fixID string, at time.Duration) {
		t.Helper()
		data := map[string]any{"step": "check", "index": 0, "attempt": 2, "fix_id": fixID}
		if typ == events.HealHealed {
			data["via"] = events.PlanLearnedFix
		} else {
			data["reason"] = "did not heal"
		}
		apply(t, p, s, typ, "run1", at, data)
	}

	learn(events.FixFromAgent, 0)
	if f := get(); f.Confidence != 0.6 || f.Source != events.FixFromAgent || !f.LearnedAt.Equal(t0) || !f.Usable() {
		t.Fatalf("an agent's fix: %+v", f)
	}
	// Up on a heal: c + (1-c)*0.3.
	for i, want := range []float64{0.72, 0.804, 0.863} {
		outcome(events.HealHealed, id, time.Duration(i+1)*time.Hour)
		if f := get(); f.Confidence != want || f.Healed != i+1 || !f.LastUsed.Equal(t0.Add(time.Duration(i+1)*time.Hour)) {
			t.Errorf("after %d heals: confidence %v healed %d last used %s; want %v", i+1, f.Confidence, f.Healed, f.LastUsed, want)
		}
	}
	// Down on a failed heal: halved; unusable below 0.3.
	for i, want := range []float64{0.432, 0.216} {
		outcome(events.HealGaveUp, id, time.Duration(10+i)*time.Hour)
		f := get()
		if f.Confidence != want || f.Failed != i+1 {
			t.Errorf("after %d failed heals: confidence %v failed %d; want %v", i+1, f.Confidence, f.Failed, want)
		}
		if f.Usable() != (want >= readmodel.FixMinConfidence) {
			t.Errorf("at %v usable = %v", f.Confidence, f.Usable())
		}
	}
	// Outcomes of other fixes, or of heals without a fix, change nothing.
	before := get()
	outcome(events.HealHealed, "", 20*time.Hour)
	outcome(events.HealGaveUp, "fix-other", 21*time.Hour)
	if after := get(); after.Confidence != before.Confidence || after.Healed != before.Healed || after.Failed != before.Failed {
		t.Errorf("unrelated outcomes changed the fix: %+v → %+v", before, after)
	}
	if _, ok := s["fix-other"]; ok {
		t.Error("an outcome for an unknown fix created it")
	}
	// A person re-teaching it resets the confidence, keeps the record.
	learn(events.FixFromPerson, 0)
	if f := get(); f.Confidence != 0.9 || f.Healed != 3 || f.Failed != 2 {
		t.Errorf("re-taught by a person: %+v", f)
	}
	learn(events.FixFromAgent, 0.5)
	if f := get(); f.Confidence != 0.5 {
		t.Errorf("a stated confidence is kept: %v", f.Confidence)
	}
	apply(t, p, s, events.FixForgotten, id, 30*time.Hour, events.FixForgottenData{By: "person/ana"})
	if _, ok := s[id]; ok {
		t.Error("a forgotten fix is still there")
	}
}

func TestStatsCounts(t *testing.T) {
	p := learner.StatsProjection{}
	s := mapStore{}
	day := func(d int) time.Duration { return time.Duration(d) * 24 * time.Hour }
	fail := func(run string, at time.Duration) {
		apply(t, p, s, events.RunStepFailed, run, at, events.StepFailedData{Step: "x", Index: 0, Attempt: 1, Tool: "kube", Error: events.ErrorInfo{Message: "Unauthorized"}})
	}
	fail("a", 0)
	apply(t, p, s, events.HealTriggered, "a", 0, events.HealTriggeredData{Step: "x", Attempt: 1, Classification: events.Classification{Kind: "auth"}, Plan: events.PlanPatternFix, HealAttempt: 1})
	apply(t, p, s, events.HealHealed, "a", time.Minute, events.HealHealedData{Step: "x", Attempt: 2, Via: events.PlanPatternFix})
	fail("b", day(1))
	apply(t, p, s, events.HealTriggered, "b", day(1), events.HealTriggeredData{Step: "x", Attempt: 1, Classification: events.Classification{Kind: "unknown"}, Plan: events.PlanAgent, HealAttempt: 1})
	apply(t, p, s, events.HealEscalated, "b", day(1), events.HealEscalatedData{Step: "x", Attempt: 1, Agent: "agent/a", Context: map[string]any{}})
	apply(t, p, s, events.HealHealed, "b", day(1)+time.Hour, events.HealHealedData{Step: "x", Attempt: 2, Via: events.PlanAgent})
	apply(t, p, s, events.FixLearned, "fix-1", day(1)+time.Hour, events.FixLearnedData{Tool: "kube", ErrorPattern: "x", Description: "x", Source: "agent"})
	// A second heal of the same step is not a new failure type.
	fail("c", day(100))
	apply(t, p, s, events.HealTriggered, "c", day(100), events.HealTriggeredData{Step: "x", Attempt: 2, Classification: events.Classification{Kind: "auth"}, Plan: events.PlanPatternFix, HealAttempt: 2})
	apply(t, p, s, events.HealGaveUp, "c", day(100), events.HealGaveUpData{Step: "x", Attempt: 2, Reason: "no"})
	var st readmodel.FailureStats
	if ok, _ := s.Get(context.Background(), readmodel.StatsKey, &st); !ok {
		t.Fatal("no stats")
	}
	if st.TotalFailures != 3 || st.AutoFixed != 1 || st.AgentFixed != 1 || st.ManualRequired != 1 || st.GaveUp != 1 || st.FixesLearned != 1 {
		t.Errorf("stats %+v", st)
	}
	if st.ByType["auth"] != 1 || st.ByType["unknown"] != 1 || len(st.ByType) != 2 {
		t.Errorf("by type %v", st.ByType)
	}
	if r := st.AutoHealRate(); r < 0.333 || r > 0.334 {
		t.Errorf("auto-heal rate %v", r)
	}
	// Daily figures older than 90 days before the last event are dropped.
	if _, ok := st.Daily[t0.Format("2006-01-02")]; ok {
		t.Errorf("a day 100 days old is kept: %v", st.SortedDays())
	}
	if days := st.SortedDays(); len(days) != 1 || days[0] != t0.Add(day(100)).Format("2006-01-02") || st.Daily[days[0]].Total != 1 {
		t.Errorf("daily %v", st.Daily)
	}
	if !st.Last.Equal(t0.Add(day(100))) {
		t.Errorf("last %s", st.Last)
	}
	if len(st.Weekly) != 2 {
		t.Errorf("weekly %v", st.Weekly)
	}
}

func keys(s mapStore) []string {
	var out []string
	for k := range s {
		out = append(out, k)
	}
	return out
}

// TestPatternCallsEndWithTheRun: the shapes of a run's open calls live in
// one key that goes with the last result, or with the run's end when a
// result never comes (an agent that went quiet, abandoned by the runner).
func TestPatternCallsEndWithTheRun(t *testing.T) {
	p := learner.PatternsProjection{}
	s := mapStore{}
	started := func(run string, index int) {
		t.Helper()
		apply(t, p, s, events.RunStepStarted, run, 0, events.StepStartedData{Step: fmt.Sprintf("s%d", index), Index: index, Attempt: 1, Kind: "tool", Tool: "quay_check", Args: map[string]any{"tag": "abc1234"}})
	}
	started("r1", 0)
	started("r1", 1)
	if _, ok := s["call.r1"]; !ok || len(s) != 1 {
		t.Fatalf("store after two calls = %v, want one key call.r1", keys(s))
	}
	apply(t, p, s, events.RunStepCompleted, "r1", time.Second, events.StepCompletedData{Step: "s0", Index: 0, Attempt: 1})
	if _, ok := s["call.r1"]; !ok {
		t.Fatalf("call.r1 went with the first of two results")
	}
	apply(t, p, s, events.RunStepCompleted, "r1", 2*time.Second, events.StepCompletedData{Step: "s1", Index: 1, Attempt: 1})
	if _, ok := s["call.r1"]; ok {
		t.Errorf("call.r1 kept after the last result: %v", keys(s))
	}
	for _, end := range []events.Type{events.RunAbandoned, events.RunCancelled, events.RunFailed, events.RunCompleted} {
		run := "r-" + strings.ReplaceAll(string(end), ".", "-")
		started(run, 0)
		var data any = events.RunAbandonedData{Reason: "quiet", IdleMS: 1}
		switch end {
		case events.RunCancelled:
			data = events.RunCancelledData{By: "user:x"}
		case events.RunFailed:
			data = events.RunFailedData{Error: events.ErrorInfo{Message: "x"}}
		case events.RunCompleted:
			data = events.RunCompletedData{}
		}
		apply(t, p, s, end, run, time.Hour, data)
		if _, ok := s["call."+run]; ok {
			t.Errorf("the open call of a run that ended with %s is kept", end)
		}
	}
	if len(s) != 0 {
		t.Errorf("keys left: %v", keys(s))
	}
}

// A fix whose args patch could never apply (published around the healer's
// heed.cmd.fix.learn) is refused as poison, with the reason, and not
// projected: it never shows as a known issue.
func TestFixThatCannotApplyIsRefused(t *testing.T) {
	p := learner.FixesProjection{}
	s := mapStore{}
	ev, err := events.NewEvent(events.FixLearned, "fix-0123456789abcdef0123", "fix-0123456789abcdef0123/taught/1", "test", events.FixLearnedData{
		Tool: "quay_check", ErrorPattern: "manifest unknown: <h>", Description: "junk", Source: events.FixFromPerson,
		ArgsPatch: map[string]any{"tag": "{{ bogus("}})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Apply(context.Background(), s, &ev)
	if events.CodeOf(err) != events.CodePoison || !strings.Contains(err.Error(), "args_patch.tag") {
		t.Fatalf("Apply = %v, want poison naming args_patch.tag", err)
	}
	if len(s) != 0 {
		t.Errorf("the store holds %v, want nothing", keys(s))
	}
}

// TestOnlyPeopleDecideSkillSteps: only a person's answer to a question
// the runner asked counts for a skill step's record. A question anyone
// asked through heed.cmd.confirm.request, labelled with a skill and step,
// counts under its requester; a deadline's default, an agent's, a learned
// preference's or --yes answer counts for nothing. (An agent asked four
// questions labelled prod_db/truncate, let them time out to proceed, and
// the escalator then approved prod_db/truncate from the cache.)
func TestOnlyPeopleDecideSkillSteps(t *testing.T) {
	p := learner.DecisionsProjection{}
	s := mapStore{}
	opts := []events.Option{{Label: "Go", Value: "proceed"}, {Label: "No", Value: "cancel"}}
	idx := 0
	for i, m := range []string{events.MethodTimeout, events.MethodAgent, events.MethodMemory, events.MethodOverride, events.MethodError} {
		cid := fmt.Sprintf("runx%d-s0-a1", i)
		apply(t, p, s, events.ConfirmRequested, cid, time.Duration(i)*time.Minute, events.ConfirmRequestedData{Message: "truncate?", Options: opts, Default: "proceed",
			Requester: "heed/runner", RunID: fmt.Sprintf("runx%d", i), Skill: "prod_db", Step: "truncate", Index: &idx})
		apply(t, p, s, events.ConfirmAnswered, cid, time.Duration(i)*time.Minute+time.Second, events.ConfirmAnsweredData{Choice: "proceed", Method: m, By: "someone"})
	}
	for i := range 4 {
		cid := fmt.Sprintf("sneaky-%d", i)
		apply(t, p, s, events.ConfirmRequested, cid, time.Hour+time.Duration(i)*time.Minute, events.ConfirmRequestedData{Message: "May I read the logs?", Options: opts,
			Requester: "agent/sneaky", Skill: "prod_db", Step: "truncate"})
		apply(t, p, s, events.ConfirmAnswered, cid, time.Hour+time.Duration(i)*time.Minute+time.Second, events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "person/ana"})
	}
	var d readmodel.Decision
	if ok, _ := s.Get(context.Background(), readmodel.DecisionKey("prod_db/truncate", "default"), &d); ok {
		t.Fatalf("prod_db/truncate has a record from no person's answer to the runner: %+v", d)
	}
	if ok, _ := s.Get(context.Background(), readmodel.DecisionKey("direct/agent/sneaky", "default"), &d); !ok || d.Count != 4 {
		t.Fatalf("the agent's own questions count under its name: %v %+v", ok, d)
	}
}

// TestDecisionCountedOnceWithQuorum: with a quorum the decision is the
// answer that takes effect, counted once; votes and refused answers are not
// decisions.
func TestDecisionCountedOnceWithQuorum(t *testing.T) {
	p := learner.DecisionsProjection{}
	s := mapStore{}
	idx := 0
	apply(t, p, s, events.ConfirmRequested, "q1", 0, events.ConfirmRequestedData{Message: "scale?", Options: []events.Option{{Label: "Go", Value: "proceed"}, {Label: "No", Value: "cancel"}},
		Requester: "heed/runner", RunID: "run1", Skill: "scale_down", Step: "confirm_scale", Index: &idx,
		Approvers: []string{"alice", "bob", "carol"}, Quorum: &events.Quorum{Required: 2}})
	count := func() int {
		var d readmodel.Decision
		_, _ = s.Get(context.Background(), readmodel.DecisionKey("scale_down/confirm_scale", "default"), &d)
		return d.Count
	}
	for i, by := range []string{"mallory", "alice", "alice", "bob", "carol"} {
		apply(t, p, s, events.ConfirmAnswered, "q1", time.Duration(i+1)*time.Second, events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: by, RunID: "run1"})
		want := 0
		if i >= 3 {
			want = 1 // bob's vote completes the quorum
		}
		if got := count(); got != want {
			t.Fatalf("after %s's answer: %d decisions, want %d", by, got, want)
		}
	}
}

// The learned cache from escalations: 4 approved and successful identical
// requests make the 5th a candidate; one failure suspends it at once;
// people approving again lift the suspension, and the success rate
// decides when it is a candidate again.
func TestEscalationCache(t *testing.T) {
	p := learner.DecisionsProjection{}
	s := mapStore{}
	const op, scope = "git.push", "feature/*"
	at := time.Duration(0)
	n := 0
	decide := func(method, decision string) string {
		n++
		id := fmt.Sprintf("esc-%d", n)
		at += time.Minute
		apply(t, p, s, events.EscalationDecided, id, at, events.EscalationDecidedData{Decision: decision, Method: method, By: "user:alice", Operation: op, Scope: scope})
		return id
	}
	outcome := func(id, o string) {
		at += time.Minute
		apply(t, p, s, events.EscalationOutcome, id, at, events.EscalationOutcomeData{Outcome: o, By: "agent", Operation: op, Scope: scope, Decision: events.EscalationApproved})
	}
	get := func() readmodel.Decision {
		var d readmodel.Decision
		_, _ = s.Get(context.Background(), readmodel.DecisionKey(op, scope), &d)
		return d
	}
	for i := 1; i <= 4; i++ {
		id := decide(events.MethodUser, events.EscalationApproved)
		if d := get(); d.Candidate != (i == 4) {
			t.Fatalf("after %d approvals: %+v", i, d)
		}
		outcome(id, events.OutcomeSuccess)
	}
	d := get()
	if !d.Candidate || d.Count != 4 || d.Successes != 4 || d.ConfidenceBoost != 0.2 {
		t.Fatalf("after 4 approved and successful: %+v, want a candidate with boost 0.2", d)
	}
	// Neither a rule's approval nor the final action is a decision.
	decide(events.EscMethodRule, events.EscalationApproved)
	decide(events.EscMethodFinalAction, events.EscalationDenied)
	if d := get(); d.Count != 4 || d.Denied != 0 {
		t.Fatalf("a rule or the final action was counted: %+v", d)
	}
	// The cache's approval is not a decision (no self-reinforcement); its
	// failure suspends the record at once.
	id := decide(events.EscMethodCache, events.EscalationApproved)
	if d := get(); d.Count != 4 || d.CacheApproved != 1 || !d.Candidate {
		t.Fatalf("after the cache's approval: %+v", d)
	}
	outcome(id, events.OutcomeFailure)
	outcome(id, events.OutcomeFailure) // reported twice: counted once
	d = get()
	if d.Candidate || !d.Suspended || d.Failures != 1 || d.ConfidenceBoost != 0 || !d.SuspendedAt.Equal(t0.Add(at-time.Minute)) {
		t.Fatalf("after a failure: %+v, want suspended, no candidate", d)
	}
	// A person's denial does not lift it.
	decide(events.MethodUser, events.EscalationDenied)
	if d := get(); !d.Suspended || d.Candidate {
		t.Fatalf("a denial lifted the suspension: %+v", d)
	}
	// People approve again: the suspension is lifted at the first approval,
	// and the record is a candidate again once over 90% of outcomes
	// succeeded: 10 of 11 (4 + 6 more), with more than 90% approvals.
	for i := 1; i <= 6; i++ {
		id := decide(events.MethodUser, events.EscalationApproved)
		if d := get(); d.Suspended {
			t.Fatalf("still suspended after a person's approval: %+v", d)
		}
		outcome(id, events.OutcomeSuccess)
		d := get()
		if want := i == 6; d.Candidate != want {
			t.Fatalf("after %d approvals again: candidate %v, want %v (%+v)", i, d.Candidate, want, d)
		}
	}
	// 11 decisions, 10 approved: 0.909 > 0.9.
	if d := get(); d.Count != 11 || d.Approved != 10 || d.SuccessRate != 0.909 || d.ConfidenceBoost != 0.3 {
		t.Fatalf("candidate again: %+v", d)
	}
	// An escalation's offer (a confirmation) is not a skill decision.
	apply(t, p, s, events.ConfirmRequested, "esc-1-o1", at, events.ConfirmRequestedData{Message: "push?", Options: []events.Option{{Label: "Approve", Value: "approve"}},
		Requester: "heed/escalator", Context: map[string]any{"escalation_id": "esc-1"}})
	apply(t, p, s, events.ConfirmAnswered, "esc-1-o1", at, events.ConfirmAnsweredData{Choice: "approve", Method: events.MethodUser, By: "user:alice"})
	if _, ok := s[readmodel.DecisionKey("direct/heed/escalator", "default")]; ok {
		t.Error("an escalation's offer was counted as a confirmation's decision")
	}
	// Old values (before the cache from escalations) still decode.
	var old readmodel.Decision
	if err := json.Unmarshal([]byte(`{"operation":"a/b","scope":"default","count":5,"approved":5,"successes":5,"success_rate":1,"auto_approve_candidate":true,"confidence_boost":0.25}`), &old); err != nil || old.Suspended || !old.Candidate {
		t.Errorf("old value: %+v %v", old, err)
	}
}

// The cache keeps a record per environment: what people approved on
// stage never approves the same operation and scope in production.
func TestEscalationCachePerEnvironment(t *testing.T) {
	p := learner.DecisionsProjection{}
	s := mapStore{}
	const op, scope = "deploy", "service:api"
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("esc-stage-%d", i)
		at := time.Duration(i) * time.Minute
		apply(t, p, s, events.EscalationDecided, id, at, events.EscalationDecidedData{Decision: events.EscalationApproved, Method: events.MethodUser, By: "user:alice", Operation: op, Scope: scope, Environment: "stage"})
		apply(t, p, s, events.EscalationOutcome, id, at+time.Second, events.EscalationOutcomeData{Outcome: events.OutcomeSuccess, By: "agent", Operation: op, Scope: scope, Environment: "stage", Decision: events.EscalationApproved})
	}
	var stage readmodel.Decision
	if ok, _ := s.Get(context.Background(), readmodel.EscalationDecisionKey(op, "stage", scope), &stage); !ok || !stage.Candidate || stage.Environment != "stage" || stage.Count != 5 || stage.Successes != 5 {
		t.Fatalf("stage record: %+v (found %v), want a candidate of 5", stage, ok)
	}
	for _, env := range []string{"prod", ""} {
		if _, ok := s[readmodel.EscalationDecisionKey(op, env, scope)]; ok {
			t.Errorf("approvals on stage made a record for environment %q", env)
		}
	}
	// A denial in production is production's alone.
	apply(t, p, s, events.EscalationDecided, "esc-prod-1", 10*time.Minute, events.EscalationDecidedData{Decision: events.EscalationDenied, Method: events.MethodUser, By: "user:bob", Operation: op, Scope: scope, Environment: "prod"})
	var prod readmodel.Decision
	if ok, _ := s.Get(context.Background(), readmodel.EscalationDecisionKey(op, "prod", scope), &prod); !ok || prod.Denied != 1 || prod.Candidate {
		t.Fatalf("prod record: %+v (found %v)", prod, ok)
	}
	if _, _ = s.Get(context.Background(), readmodel.EscalationDecisionKey(op, "stage", scope), &stage); stage.Denied != 0 || !stage.Candidate {
		t.Fatalf("a denial in production changed stage's record: %+v", stage)
	}
	if a, b := readmodel.EscalationDecisionKey(op, "prod", scope), readmodel.DecisionKey(op, scope); a == b {
		t.Fatalf("an environment's key %q is the key without one", a)
	}
	// An escalation may name no scope: its key is still a key NATS takes
	// (no empty token: not ending in a dot, no two dots in a row).
	valid := regexp.MustCompile(`^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$`)
	for _, k := range []string{readmodel.EscalationDecisionKey(op, "prod", ""), readmodel.EscalationDecisionKey(op, "", ""), readmodel.EscalationDecisionKey("", "", ""), readmodel.DecisionKey(op, "")} {
		if !valid.MatchString(k) {
			t.Errorf("key %q is not a valid KV key", k)
		}
	}
}

func TestEscalationStats(t *testing.T) {
	p := learner.StatsProjection{}
	s := mapStore{}
	day := 24 * time.Hour
	req := events.EscalationRequestedData{Session: "s1", Operation: "op", Requester: "agent"}
	esc := func(id string, at time.Duration, route, method, decision string, escalated ...string) {
		apply(t, p, s, events.EscalationRequested, id, at, req)
		apply(t, p, s, events.EscalationRouted, id, at, events.EscalationRoutedData{Decision: route, Reason: "r"})
		for _, r := range escalated {
			apply(t, p, s, events.EscalationEscalated, id, at, events.EscalationEscalatedData{FromTier: "t1", Reason: r, EscalationCount: 1})
		}
		if method != "" {
			apply(t, p, s, events.EscalationDecided, id, at+time.Minute, events.EscalationDecidedData{Decision: decision, Method: method, By: "x", Operation: "op"})
		}
	}
	esc("e1", 0, events.RouteAutoApprove, events.EscMethodRule, events.EscalationApproved)
	esc("e2", 0, events.RouteConditionalApprove, events.EscMethodRule, events.EscalationApproved)
	esc("e3", day, events.RouteCachedApprove, events.EscMethodCache, events.EscalationApproved)
	esc("e4", day, events.RouteEscalate, events.MethodUser, events.EscalationApproved, events.EscalateTimeout)
	esc("e5", day, events.RouteEscalate, events.EscMethodFinalAction, events.EscalationDenied, events.EscalateUnreachable, events.EscalateTimeout)
	esc("e6", day, events.RouteEscalate, "", "") // held
	apply(t, p, s, events.EscalationOutcome, "e3", day+time.Hour, events.EscalationOutcomeData{Outcome: events.OutcomeFailure, By: "agent", Operation: "op", Decision: "approved"})
	var st readmodel.EscalationStats
	if ok, _ := s.Get(context.Background(), readmodel.EscalationStatsKey, &st); !ok {
		t.Fatal("no escalation stats")
	}
	if st.Requested != 6 || st.Routed[events.RouteEscalate] != 3 || st.Routed[events.RouteAutoApprove] != 1 || st.Routed[events.RouteCachedApprove] != 1 {
		t.Errorf("requested/routed: %+v", st)
	}
	if st.Decided[events.EscMethodRule] != 2 || st.Decided[events.EscMethodCache] != 1 || st.Decided[events.MethodUser] != 1 || st.Decided[events.EscMethodFinalAction] != 1 {
		t.Errorf("decided: %v", st.Decided)
	}
	if st.Escalated[events.EscalateTimeout] != 2 || st.Escalated[events.EscalateUnreachable] != 1 || st.Approved != 4 || st.Denied != 1 || st.Failures != 1 {
		t.Errorf("escalated/approved/outcomes: %+v", st)
	}
	if st.Avoided != 3 || st.AvoidedShare() != 0.6 {
		t.Errorf("avoided %d (%v), want 3 of 5", st.Avoided, st.AvoidedShare())
	}
	d0, d1 := t0.Format("2006-01-02"), t0.Add(day).Format("2006-01-02")
	if st.Daily[d0] != (readmodel.EscalationPeriod{Requested: 2, Decided: 2, Avoided: 2}) || st.Daily[d1] != (readmodel.EscalationPeriod{Requested: 4, Decided: 3, Avoided: 1}) {
		t.Errorf("daily: %v", st.Daily)
	}
	// The failure statistics are another key, untouched.
	if _, ok := s[readmodel.StatsKey]; ok {
		t.Error("escalations counted as failures")
	}
}
