package healer_test

// End-to-end tests of healing against a real embedded nats-server: the
// runner, the healer, the learner and the confirm router each run with their
// own runtime (connection, codec, bus), as separate processes would, and talk
// only through events. The tools are the simulated ones of skills/tools:
// $HEED_SIM_STATE holds the marks that make the simulated cluster answer
// Unauthorized (logged-out-stage) or be unreachable (offline). The log is
// the only thing the tests assert on, the way `heed audit` reads it, plus the
// learner's KV projections.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/service/servicetest"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/healer"
	"github.com/heedhq/heed/services/learner"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// ---- services, each with its own runtime ----

// stack is one fresh server with the simulated tools' state directory.
type stack struct {
	env   *eventstest.Env
	bus   *events.Bus
	nc    *nats.Conn
	sim   string
	tools string
}

func newStack(t *testing.T) *stack {
	t.Helper()
	sim := t.TempDir()
	// Exec tools read it from the process environment (tools.yaml passes it
	// through): set before any service starts.
	t.Setenv("HEED_SIM_STATE", sim)
	tools, err := filepath.Abs("../../skills/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := eventstest.Start(t)
	return &stack{env: env, bus: env.Bus(t), nc: env.Conn(t), sim: sim, tools: tools}
}

// run starts a service and waits until its durable consumers exist: every
// service provisions streams and buckets as it starts, and a stream update
// racing another service's consumer creation is a data race inside
// nats-server, so services start one after the other.
func (s *stack) run(t *testing.T, name string, run service.RunFunc, consumers ...string) {
	t.Helper()
	servicetest.Start(t, s.env, name, run)
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, c := range consumers {
			if _, err := s.bus.JetStream().Consumer(ctxFor(t, 5*time.Second), events.EventStream, c); err != nil {
				return fmt.Errorf("%s: consumer %s: %v", name, c, err)
			}
		}
		return nil
	})
}

func (s *stack) runner(t *testing.T, cfg runner.Config) {
	t.Helper()
	cfg.ToolsFile = s.tools
	s.run(t, "runner", func(ctx context.Context, rt *service.Runtime) error { return runner.Run(ctx, rt, cfg) }, runner.ConsumerName)
}

func (s *stack) healer(t *testing.T, o healer.Config) {
	t.Helper()
	o.ToolsFile = s.tools
	s.run(t, "healer", func(ctx context.Context, rt *service.Runtime) error { return healer.Run(ctx, rt, o) }, healer.ConsumerName)
}

func (s *stack) learner(t *testing.T) {
	t.Helper()
	var names []string
	for _, p := range learner.Projections() {
		names = append(names, events.ProjectorName(p))
	}
	s.run(t, "learner", learner.Run, names...)
}

func (s *stack) router(t *testing.T) {
	t.Helper()
	s.run(t, "confirm-router", func(ctx context.Context, rt *service.Runtime) error {
		return confirm.Run(ctx, rt, confirm.Config{})
	}, confirm.ConsumerName)
}

// all starts the learner, the confirm router, the healer and the runner.
func (s *stack) all(t *testing.T) {
	t.Helper()
	s.learner(t)
	s.router(t)
	s.healer(t, healer.Config{})
	s.runner(t, runner.Config{HealWait: healWait})
}

// healWait is the runner's wait for the healer's first verdict in these
// tests: longer than the default so a loaded machine does not turn a slow
// healer into a give-up.
const healWait = 10 * time.Second

func (s *stack) mark(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(s.sim, name)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// command sends a runner command and returns its reply.
func (s *stack) command(t *testing.T, subject string, req any) command.RunReply {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var msg *nats.Msg
	// The runner registers its commands once it is up.
	for deadline := time.Now().Add(10 * time.Second); ; {
		msg, err = s.nc.Request(subject, b, 15*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		break
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("%s refused: %s: %s", subject, code, msg.Header.Get(micro.ErrorHeader))
	}
	var rep command.RunReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		t.Fatalf("%s reply %q: %v", subject, msg.Data, err)
	}
	return rep
}

func skillFile(t *testing.T, name string) (file, src string) {
	t.Helper()
	file, err := filepath.Abs(filepath.Join("../../skills", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return file, string(b)
}

// start starts a run of a skill (its YAML source) and returns the run id.
func (s *stack) start(t *testing.T, file, src string, inputs map[string]any, agent string) string {
	t.Helper()
	var req command.StartRun
	req.Skill.Source, req.Skill.File = src, file
	req.Inputs, req.Yes, req.Agent, req.RequestedBy = inputs, true, agent, "test"
	rep := s.command(t, command.RunStart, req)
	if rep.RunID == "" {
		t.Fatalf("start: no run id in %+v", rep)
	}
	return rep.RunID
}

// ---- the log, read as `heed audit` does ----

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// logOf returns every event of one aggregate in log order; every stored
// message must be a valid event.
func logOf(t *testing.T, bus *events.Bus, kind, id string) []*events.Event {
	t.Helper()
	var out []*events.Event
	_, err := events.ReadLog(ctxFor(t, 10*time.Second), bus.JetStream(), events.EventStream, []string{events.SubjectFilter(kind, id)}, 0, func(raw events.RawMsg) error {
		ev, err := bus.Codec().DecodeStored(raw)
		if err != nil {
			return fmt.Errorf("seq %d on %s is not a valid event: %w", raw.Seq, raw.Subject, err)
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		t.Fatalf("read heed.%s.%s.>: %v", kind, id, err)
	}
	return out
}

func ofType(evs []*events.Event, typ events.Type) []*events.Event {
	var out []*events.Event
	for _, ev := range evs {
		if events.Type(ev.Type()) == typ {
			out = append(out, ev)
		}
	}
	return out
}

func decode[T any](t *testing.T, ev *events.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ev.Data(), &v); err != nil {
		t.Fatalf("decode %s %s: %v", ev.Type(), ev.ID(), err)
	}
	return v
}

type ref struct {
	Index   *int `json:"index"`
	Attempt int  `json:"attempt"`
}

// story is the run's log as "type aN" lines for one step index (step and
// heal events only), e.g. "step.failed a1", "heal.retried a1".
func story(t *testing.T, evs []*events.Event, index int) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		verb := events.Type(ev.Type()).Verb()
		if !strings.HasPrefix(verb, "step.") && !strings.HasPrefix(verb, "heal.") {
			continue
		}
		r := decode[ref](t, ev)
		if r.Index == nil || *r.Index != index {
			continue
		}
		out = append(out, fmt.Sprintf("%s a%d", verb, r.Attempt))
	}
	return out
}

func verbs(evs []*events.Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, events.Type(ev.Type()).Verb())
	}
	return strings.Join(out, " ")
}

// waitRun polls the run's log until every wanted type is there and returns
// the log. A terminal event that is not wanted fails at once.
func waitRun(t *testing.T, s *stack, id string, within time.Duration, want ...events.Type) []*events.Event {
	t.Helper()
	var evs []*events.Event
	deadline := time.Now().Add(within)
	for {
		evs = logOf(t, s.bus, "run", id)
		missing := ""
		for _, w := range want {
			if len(ofType(evs, w)) == 0 {
				missing = string(w)
				break
			}
		}
		if missing == "" {
			return evs
		}
		for _, term := range []events.Type{events.RunCompleted, events.RunFailed, events.RunCancelled} {
			if len(ofType(evs, term)) > 0 && !contains(want, term) {
				t.Fatalf("run %s ended with %s while waiting for %s; log: %s%s", id, term, missing, verbs(evs), failure(t, evs))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s has no %s after %s; log: %s%s", id, missing, within, verbs(evs), failure(t, evs))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func failure(t *testing.T, evs []*events.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		switch events.Type(ev.Type()) {
		case events.RunStepFailed, events.RunFailed, events.HealGaveUp:
			fmt.Fprintf(&b, "\n  %s: %s", ev.Type(), ev.Data())
		}
	}
	return b.String()
}

func contains(ts []events.Type, t events.Type) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func one(t *testing.T, evs []*events.Event, typ events.Type) *events.Event {
	t.Helper()
	got := ofType(evs, typ)
	if len(got) != 1 {
		t.Fatalf("want one %s, got %d; log: %s", typ, len(got), verbs(evs))
	}
	return got[0]
}

func none(t *testing.T, evs []*events.Event, types ...events.Type) {
	t.Helper()
	for _, typ := range types {
		if got := ofType(evs, typ); len(got) > 0 {
			t.Errorf("want no %s, got %d: %s", typ, len(got), got[0].Data())
		}
	}
}

func sameJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var x, y any
	_ = json.Unmarshal(ja, &x)
	_ = json.Unmarshal(jb, &y)
	return reflect.DeepEqual(x, y)
}

// kvValue reads a projection's value at key (false if absent or deleted).
func kvValue(t *testing.T, bus *events.Bus, bucket, key string, v any) bool {
	t.Helper()
	kv, err := bus.JetStream().KeyValue(ctxFor(t, 5*time.Second), bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	e, err := kv.Get(ctxFor(t, 5*time.Second), key)
	if err != nil {
		return false
	}
	var env struct {
		Deleted bool            `json:"deleted"`
		Value   json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(e.Value(), &env); err != nil {
		t.Fatalf("%s/%s: %v", bucket, key, err)
	}
	if env.Deleted {
		return false
	}
	if err := json.Unmarshal(env.Value, v); err != nil {
		t.Fatalf("%s/%s: %v", bucket, key, err)
	}
	return true
}

func waitFix(t *testing.T, bus *events.Bus, id string, ok func(readmodel.Fix) error) readmodel.Fix {
	t.Helper()
	var f readmodel.Fix
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		f = readmodel.Fix{}
		if !kvValue(t, bus, readmodel.FixesBucket, id, &f) {
			return fmt.Errorf("%s has no fix %s", readmodel.FixesBucket, id)
		}
		return ok(f)
	})
	return f
}

const loggedOutMsg = "error: You must be logged in to the server (Unauthorized)"

// ---- a) a known error healed by the generic pattern ----

func TestAuthFailureHealedByLoginAndRetried(t *testing.T) {
	s := newStack(t)
	mark := s.mark(t, "logged-out-stage")
	s.all(t)

	file, src := skillFile(t, "scale_down.yaml")
	id := s.start(t, file, src, map[string]any{"name": "api"}, "")
	evs := waitRun(t, s, id, 20*time.Second, events.RunCompleted, events.HealHealed)

	want := []string{
		"step.started a1", "step.failed a1",
		"heal.triggered a1", "heal.fix_applied a1", "heal.retried a1",
		"step.started a2", "step.completed a2", "heal.healed a2",
	}
	if got := story(t, evs, 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("step current:\n got %q\nwant %q", got, want)
	}

	failed := decode[events.StepFailedData](t, one(t, evs, events.RunStepFailed))
	if failed.Step != "current" || failed.Tool != "kube_get_deployment" || !strings.Contains(failed.Error.Message, "Unauthorized") {
		t.Fatalf("step.failed = %+v", failed)
	}
	trEv := one(t, evs, events.HealTriggered)
	if trEv.Source() != healer.Source {
		t.Errorf("heal.triggered source %q", trEv.Source())
	}
	tr := decode[events.HealTriggeredData](t, trEv)
	if tr.Classification.Kind != "auth" || tr.Plan != events.PlanPatternFix || tr.HealAttempt != 1 || tr.Attempt != 1 {
		t.Errorf("heal.triggered = %+v", tr)
	}
	if tr.Classification.Signature != events.ErrorSignature(loggedOutMsg) {
		t.Errorf("signature %q, want %q", tr.Classification.Signature, events.ErrorSignature(loggedOutMsg))
	}
	if tr.Fix == nil || tr.Fix.Source != "pattern" || tr.Fix.Tool != "kube_login" || tr.Fix.FixID != "" ||
		!sameJSON(tr.Fix.Args, map[string]any{"cluster": "stage"}) {
		t.Errorf("heal.triggered fix = %+v", tr.Fix)
	}
	applied := decode[events.HealFixAppliedData](t, one(t, evs, events.HealFixApplied))
	if !applied.OK || applied.Fix.Tool != "kube_login" || applied.Error != nil {
		t.Errorf("heal.fix_applied = %+v", applied)
	}
	retriedEv := one(t, evs, events.HealRetried)
	retried := decode[events.HealRetriedData](t, retriedEv)
	if retried.NextAttempt != 2 || retried.Attempt != 1 || !sameJSON(retried.Args, failed.Args) {
		t.Errorf("heal.retried = %+v (failed args %v)", retried, failed.Args)
	}
	var second events.StepStartedData
	for _, ev := range ofType(evs, events.RunStepStarted) {
		if d := decode[events.StepStartedData](t, ev); d.Index == 0 && d.Attempt == 2 {
			second = d
		}
	}
	if want := id + "/s0/a1/failed"; second.RetryOf != want {
		t.Errorf("attempt 2 retry_of %q, want the failed attempt's event %q", second.RetryOf, want)
	}
	for _, ev := range ofType(evs, events.RunStepStarted) {
		if d := decode[events.StepStartedData](t, ev); d.Index == 0 && d.Attempt == 2 {
			if cause, _ := ev.Extensions()["causationid"].(string); cause != retriedEv.ID() {
				t.Errorf("attempt 2 caused by %q, want the heal.retried event %q", cause, retriedEv.ID())
			}
		}
	}
	if !sameJSON(second.Args, retried.Args) {
		t.Errorf("attempt 2 args %v, want the healer's %v", second.Args, retried.Args)
	}
	healed := decode[events.HealHealedData](t, one(t, evs, events.HealHealed))
	if healed.Via != events.PlanPatternFix || healed.Attempt != 2 || healed.Tool != "kube_get_deployment" || healed.FixID != "" {
		t.Errorf("heal.healed = %+v", healed)
	}
	none(t, evs, events.HealGaveUp, events.HealEscalated, events.RunFailed)
	done := decode[events.RunCompletedData](t, one(t, evs, events.RunCompleted))
	if !strings.Contains(done.Summary, "api scaled from 5 to 1") {
		t.Errorf("summary %q", done.Summary)
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("the logged-out mark is still there after kube_login (stat: %v)", err)
	}

	// The learner counts it: one failure, auto-fixed, of kind auth.
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		var st readmodel.FailureStats
		if !kvValue(t, s.bus, readmodel.StatsBucket, readmodel.StatsKey, &st) {
			return errors.New("no failure stats yet")
		}
		if st.TotalFailures != 1 || st.AutoFixed != 1 || st.ByType["auth"] != 1 || st.ManualRequired != 0 || st.GaveUp != 0 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// ---- b) an unknown error: the agent teaches, the next run heals alone ----

func TestAgentFixLearnedThenAppliedAlone(t *testing.T) {
	s := newStack(t)
	s.all(t)
	file, src := skillFile(t, "release_prod.yaml")
	const agent = "agent/test"
	full := "abc123" + strings.Repeat("9f", 17)
	if len(full) != 40 {
		t.Fatalf("full sha %q has %d characters", full, len(full))
	}

	// Run 1: the short SHA fails with an error no pattern fixes: the agent is asked.
	id1 := s.start(t, file, src, map[string]any{"commit_sha": "abc123"}, agent)
	evs := waitRun(t, s, id1, 20*time.Second, events.RunPaused, events.HealEscalated)
	failed := decode[events.StepFailedData](t, one(t, evs, events.RunStepFailed))
	if failed.Tool != "quay_check" || !strings.Contains(failed.Error.Message, "manifest unknown") {
		t.Fatalf("step.failed = %+v", failed)
	}
	sig := events.ErrorSignature(failed.Error.Message)
	tr := decode[events.HealTriggeredData](t, one(t, evs, events.HealTriggered))
	if tr.Plan != events.PlanAgent || tr.Classification.Kind != "not_found" || tr.Fix != nil {
		t.Errorf("heal.triggered = %+v", tr)
	}
	esc := decode[events.HealEscalatedData](t, one(t, evs, events.HealEscalated))
	if esc.Agent != agent || esc.Context["tool"] != "quay_check" || !sameJSON(esc.Context["args"], map[string]any{"tag": "abc123"}) ||
		!strings.Contains(fmt.Sprint(esc.Context["error"]), "manifest unknown") || esc.Question == "" {
		t.Errorf("heal.escalated = %+v", esc)
	}
	paused := decode[events.RunPausedData](t, one(t, evs, events.RunPaused))
	if paused.Reason != events.PauseAwaitingAgent || paused.Step != "check_image" {
		t.Errorf("run.paused = %+v", paused)
	}
	none(t, evs, events.HealRetried, events.HealGaveUp, events.HealFixApplied, events.RunFailed)

	// The agent retries with the full SHA.
	s.command(t, command.RunRetry, command.RetryStep{RunID: id1, Args: map[string]any{"tag": full}, By: agent})
	evs = waitRun(t, s, id1, 20*time.Second, events.RunCompleted, events.HealHealed)
	healed := decode[events.HealHealedData](t, one(t, evs, events.HealHealed))
	if healed.Via != events.PlanAgent || healed.Attempt != 2 || healed.Signature != sig {
		t.Errorf("heal.healed = %+v", healed)
	}
	resumedBy := ""
	for _, ev := range ofType(evs, events.RunResumed) {
		if d := decode[events.RunResumedData](t, ev); d.Index == 0 {
			resumedBy = d.By
		}
	}
	if resumedBy != agent {
		t.Errorf("check_image resumed by %q, want %q", resumedBy, agent)
	}

	// The healer learned the fix.
	fixID := events.LearnedFixID("quay_check", sig, map[string]any{"tag": "abc123"})
	fixLog := logOf(t, s.bus, "fix", fixID)
	learnedEv := one(t, fixLog, events.FixLearned)
	if learnedEv.Source() != healer.Source {
		t.Errorf("fix.learned source %q", learnedEv.Source())
	}
	learned := decode[events.FixLearnedData](t, learnedEv)
	if learned.Source != events.FixFromAgent || learned.By != agent || learned.Tool != "quay_check" || learned.ErrorPattern != sig ||
		learned.RunID != id1 || !sameJSON(learned.ArgsPatch, map[string]any{"tag": full}) ||
		!sameJSON(learned.WhenWas, map[string]any{"tag": "abc123"}) {
		t.Errorf("fix.learned = %+v", learned)
	}
	fix := waitFix(t, s.bus, fixID, func(f readmodel.Fix) error {
		if f.Source != events.FixFromAgent || f.Confidence != 0.6 || !f.Usable() {
			return fmt.Errorf("fix %+v", f)
		}
		return nil
	})
	if !sameJSON(fix.ArgsPatch, map[string]any{"tag": full}) || !sameJSON(fix.WhenWas, map[string]any{"tag": "abc123"}) {
		t.Errorf("stored fix %+v", fix)
	}

	// Run 2, same short SHA: healed by the learned fix, nobody asked.
	id2 := s.start(t, file, src, map[string]any{"commit_sha": "abc123"}, agent)
	evs = waitRun(t, s, id2, 20*time.Second, events.RunCompleted, events.HealHealed)
	started := decode[events.RunStartedData](t, one(t, evs, events.RunStarted))
	if len(started.KnownIssues) != 1 || started.KnownIssues[0].FixID != fixID {
		t.Errorf("run.started known_issues = %+v, want the learned fix %s", started.KnownIssues, fixID)
	}
	tr = decode[events.HealTriggeredData](t, one(t, evs, events.HealTriggered))
	if tr.Plan != events.PlanLearnedFix || tr.Fix == nil || tr.Fix.FixID != fixID || tr.Fix.Source != "learned" {
		t.Errorf("heal.triggered = %+v (fix %+v)", tr, tr.Fix)
	}
	retried := decode[events.HealRetriedData](t, one(t, evs, events.HealRetried))
	if retried.FixID != fixID || !sameJSON(retried.Args, map[string]any{"tag": full}) || retried.NextAttempt != 2 {
		t.Errorf("heal.retried = %+v", retried)
	}
	healed = decode[events.HealHealedData](t, one(t, evs, events.HealHealed))
	if healed.Via != events.PlanLearnedFix || healed.FixID != fixID {
		t.Errorf("heal.healed = %+v", healed)
	}
	none(t, evs, events.HealEscalated, events.HealGaveUp)
	for _, p := range ofType(evs, events.RunPaused) {
		if d := decode[events.RunPausedData](t, p); d.Reason == events.PauseAwaitingAgent {
			t.Errorf("run 2 paused for its agent: %+v", d)
		}
	}
	// A heal by the fix raises its confidence: 0.6 + 0.4*0.3.
	waitFix(t, s.bus, fixID, func(f readmodel.Fix) error {
		if f.Healed != 1 || f.Confidence != 0.72 {
			return fmt.Errorf("fix after a heal: healed %d, confidence %v", f.Healed, f.Confidence)
		}
		return nil
	})

	// Run 3, another short SHA with the same error signature: the learned
	// literal is for abc123 only, so the agent is asked again.
	id3 := s.start(t, file, src, map[string]any{"commit_sha": "abc456"}, agent)
	evs = waitRun(t, s, id3, 20*time.Second, events.HealEscalated, events.RunPaused)
	tr = decode[events.HealTriggeredData](t, one(t, evs, events.HealTriggered))
	if tr.Classification.Signature != sig {
		t.Fatalf("run 3 signature %q, want %q (the same, so that only when_was keeps the fix out)", tr.Classification.Signature, sig)
	}
	if tr.Plan != events.PlanAgent || tr.Fix != nil {
		t.Errorf("run 3 heal.triggered = %+v (fix %+v), want the agent", tr, tr.Fix)
	}
	none(t, evs, events.HealRetried, events.HealHealed)
	s.command(t, command.RunCancel, command.CancelRun{RunID: id3, By: "test"})
	waitRun(t, s, id3, 10*time.Second, events.RunCancelled)
}

// ---- c) a learned fix beats a generic pattern that matches too ----

func TestLearnedFixChosenOverPattern(t *testing.T) {
	s := newStack(t)
	mark := s.mark(t, "logged-out-stage")
	s.learner(t)
	s.router(t)
	s.runner(t, runner.Config{HealWait: healWait})

	// A person teaches a fix for "unauthorized" on kube_get_deployment: run
	// vpn_connect (not the pattern's kube_login). It is in the bucket before
	// the healer starts.
	fixID := events.FixID("kube_get_deployment", "taught: unauthorized")
	ev, err := events.NewEvent(events.FixLearned, fixID, fixID+"/taught", "heed/cli", events.FixLearnedData{
		Tool: "kube_get_deployment", ErrorPattern: "taught: unauthorized", Match: "Unauthorized",
		Description: "reconnect the VPN, then retry", Action: &events.FixAction{Tool: "vpn_connect"},
		Source: events.FixFromPerson, By: "person/ops",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.bus.Publish(ctxFor(t, 5*time.Second), &ev); err != nil {
		t.Fatal(err)
	}
	waitFix(t, s.bus, fixID, func(f readmodel.Fix) error {
		if f.Confidence != 0.9 || f.Source != events.FixFromPerson {
			return fmt.Errorf("taught fix %+v", f)
		}
		return nil
	})
	s.healer(t, healer.Config{})

	file, src := skillFile(t, "scale_down.yaml")
	id := s.start(t, file, src, map[string]any{"name": "api"}, "")
	evs := waitRun(t, s, id, 20*time.Second, events.RunFailed)

	trs := ofType(evs, events.HealTriggered)
	if len(trs) != 1 {
		t.Fatalf("want one heal.triggered, got %d; log: %s", len(trs), verbs(evs))
	}
	tr := decode[events.HealTriggeredData](t, trs[0])
	if tr.Plan != events.PlanLearnedFix || tr.Fix == nil || tr.Fix.FixID != fixID || tr.Fix.Tool != "vpn_connect" || tr.Fix.Source != "learned" {
		t.Fatalf("heal.triggered = %+v (fix %+v), want the learned fix %s", tr, tr.Fix, fixID)
	}
	if tr.Classification.Kind != "auth" {
		t.Errorf("classification %+v: the pattern still classifies", tr.Classification)
	}
	applied := decode[events.HealFixAppliedData](t, one(t, evs, events.HealFixApplied))
	if applied.Fix.Tool != "vpn_connect" || !applied.OK {
		t.Errorf("heal.fix_applied = %+v", applied)
	}
	// The wrong fix does not heal it: attempt 2 fails too, the healer gives
	// up naming the fix (not a second heal), and on_error (fail) applies.
	want := []string{
		"step.started a1", "step.failed a1", "heal.triggered a1", "heal.fix_applied a1", "heal.retried a1",
		"step.started a2", "step.failed a2", "heal.gave_up a2",
	}
	if got := story(t, evs, 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("step current:\n got %q\nwant %q", got, want)
	}
	gaveEv := one(t, evs, events.HealGaveUp)
	gave := decode[events.HealGaveUpData](t, gaveEv)
	if gaveEv.Source() != healer.Source || gave.FixID != fixID || !strings.Contains(gave.Reason, "did not heal") {
		t.Errorf("heal.gave_up %s = %+v", gaveEv.Source(), gave)
	}
	if f := decode[events.RunFailedData](t, one(t, evs, events.RunFailed)); f.Step != "current" {
		t.Errorf("run.failed = %+v", f)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("kube_login ran although the learned fix was chosen: the mark is gone (%v)", err)
	}
	// The failure halves the fix's confidence.
	waitFix(t, s.bus, fixID, func(f readmodel.Fix) error {
		if f.Failed != 1 || f.Confidence != 0.45 {
			return fmt.Errorf("fix after a failed heal: failed %d, confidence %v", f.Failed, f.Confidence)
		}
		return nil
	})
}

// ---- d) the healer is down: the runner's bounded wait ----

const missingSkill = `name: read_missing
steps:
  - name: read
    tool: kube_get_deployment
    args: {name: missing, namespace: default}
    on_error: %s
  - name: after
    compute: '"reached"'
    output: after
summary: "{{ after }}"
`

func TestHealerDownRunnerGivesUp(t *testing.T) {
	s := newStack(t)
	s.runner(t, runner.Config{HealWait: 500 * time.Millisecond})

	for _, onError := range []string{"fail", "continue"} {
		t.Run(onError, func(t *testing.T) {
			began := time.Now()
			id := s.start(t, "", fmt.Sprintf(missingSkill, onError), nil, "")
			end := events.RunFailed
			if onError == "continue" {
				end = events.RunCompleted
			}
			// Bounds for a loaded machine: what is asserted is that the run
			// ends on its own, after about HealWait, not how fast it starts.
			evs := waitRun(t, s, id, 30*time.Second, end)
			t.Logf("the run ended %s after it was started", time.Since(began).Round(time.Millisecond))
			failedEv := one(t, evs, events.RunStepFailed)
			if took := one(t, evs, end).Time().Sub(failedEv.Time()); took > 5*time.Second {
				t.Errorf("the run ended %s after the failure; want about HealWait (500ms)", took)
			}
			gaveEv := one(t, evs, events.HealGaveUp)
			gave := decode[events.HealGaveUpData](t, gaveEv)
			if gaveEv.Source() != runner.Source || !strings.Contains(gave.Reason, "healer") || gave.Index != 0 || gave.Attempt != 1 {
				t.Errorf("heal.gave_up from %s = %+v", gaveEv.Source(), gave)
			}
			if waited := gaveEv.Time().Sub(failedEv.Time()); waited < 400*time.Millisecond {
				t.Errorf("the runner gave up %s after the failure; it should wait HealWait (500ms)", waited)
			}
			none(t, evs, events.HealTriggered, events.HealRetried)
			if onError == "fail" {
				if f := decode[events.RunFailedData](t, one(t, evs, events.RunFailed)); f.Step != "read" || !strings.Contains(f.Error.Message, "not found") {
					t.Errorf("run.failed = %+v", f)
				}
				if got := story(t, evs, 1); len(got) != 0 {
					t.Errorf("step after ran: %q", got)
				}
				return
			}
			// continue: the next step starts only after the verdict.
			pos := map[string]int{}
			for i, ev := range evs {
				key := ev.Type()
				if events.Type(ev.Type()) == events.RunStepStarted {
					key += fmt.Sprint(decode[events.StepStartedData](t, ev).Index)
				}
				pos[key] = i
			}
			if pos[string(events.HealGaveUp)] > pos[string(events.RunStepStarted)+"1"] {
				t.Errorf("step after started before the heal verdict; log: %s", verbs(evs))
			}
			if d := decode[events.RunCompletedData](t, one(t, evs, events.RunCompleted)); strings.TrimSpace(d.Summary) != "reached" {
				t.Errorf("summary %q", d.Summary)
			}
		})
	}
}

// ---- e) max_heals: a fix that does not cure the failure ----

func TestMaxHealsThenOnError(t *testing.T) {
	s := newStack(t)
	// A pattern whose fix always succeeds but cures nothing: the deployment
	// stays missing.
	const cfgYAML = `
max_heals: 2
patterns:
  - kind: flaky
    match: [not found]
    fix: {tool: vpn_connect}
`
	cfg, err := healer.ParseRules("test config", []byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxHeals != 2 || cfg.Classify(`deployments.apps "missing" NOT FOUND`) == nil {
		t.Fatalf("config %+v does not classify the failure", cfg)
	}
	cfgFile := filepath.Join(t.TempDir(), "healer.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s.learner(t)
	s.healer(t, healer.Config{RulesFile: cfgFile})
	s.runner(t, runner.Config{HealWait: healWait})

	for _, onError := range []string{"fail", "continue"} {
		t.Run(onError, func(t *testing.T) {
			id := s.start(t, "", fmt.Sprintf(missingSkill, onError), nil, "")
			end := events.RunFailed
			if onError == "continue" {
				end = events.RunCompleted
			}
			evs := waitRun(t, s, id, 20*time.Second, end)
			want := []string{
				"step.started a1", "step.failed a1", "heal.triggered a1", "heal.fix_applied a1", "heal.retried a1",
				"step.started a2", "step.failed a2", "heal.triggered a2", "heal.fix_applied a2", "heal.retried a2",
				"step.started a3", "step.failed a3", "heal.gave_up a3",
			}
			if got := story(t, evs, 0); !reflect.DeepEqual(got, want) {
				t.Fatalf("step read:\n got %q\nwant %q", got, want)
			}
			for i, ev := range ofType(evs, events.HealTriggered) {
				tr := decode[events.HealTriggeredData](t, ev)
				if tr.HealAttempt != i+1 || tr.Plan != events.PlanPatternFix || tr.Classification.Kind != "flaky" {
					t.Errorf("heal.triggered %d = %+v", i+1, tr)
				}
			}
			gaveEv := one(t, evs, events.HealGaveUp)
			gave := decode[events.HealGaveUpData](t, gaveEv)
			if gaveEv.Source() != healer.Source || gave.Attempt != 3 || !strings.Contains(gave.Reason, "healed 2 times") {
				t.Errorf("heal.gave_up from %s = %+v", gaveEv.Source(), gave)
			}
			none(t, evs, events.HealHealed, events.HealEscalated)
			if onError == "fail" {
				if f := decode[events.RunFailedData](t, one(t, evs, events.RunFailed)); f.Step != "read" {
					t.Errorf("run.failed = %+v", f)
				}
				return
			}
			if got := story(t, evs, 1); !reflect.DeepEqual(got, []string{"step.started a1", "step.completed a1"}) {
				t.Errorf("step after: %q", got)
			}
		})
	}
}

// ---- the config ----

func TestDefaultConfigClassifiesAndPicksCluster(t *testing.T) {
	cfg, err := healer.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	for msg, kind := range map[string]string{
		loggedOutMsg: "auth",
		"dial tcp 10.0.0.1:6443: connect: no route to host": "network",
		"HTTP 429 Too Many Requests":                        "quota",
		"manifest unknown: quay.io/x:abc":                   "not_found",
		"context deadline exceeded":                         "timeout",
		// A status code inside a hex tag is not that status (the agent's
		// random short SHA once contained "401").
		"manifest unknown: quay.io/app-sre/backend:38f4014": "not_found",
		"GET /v2/x: status=401":                             "auth",
		"HTTP 403 Forbidden":                                "auth",
		"error 404 (page 4040 of 5000)":                     "not_found",
		"http: read on closed body: ReadTimeout":            "timeout",
	} {
		p := cfg.Classify(msg)
		if p == nil || p.Kind != kind {
			t.Errorf("Classify(%q) = %+v, want %s", msg, p, kind)
		}
	}
	for _, msg := range []string{"exit status 3: something odd", "image sha256:a4014b0d missing layer", "run 14290 stopped"} {
		if p := cfg.Classify(msg); p != nil {
			t.Errorf("Classify(%q) = %s, want no class", msg, p.Kind)
		}
	}
	for _, c := range []struct{ tool, own, text, want string }{
		{"kube_get_deployment", "stage", "prod", "stage"},
		{"bonfire_deploy", "", "", "ephemeral"},
		{"oc_get", "", "server https://api.prod.example:6443 says no", "prod"},
		{"oc_get", "", "", "stage"},
	} {
		if got := cfg.Cluster(c.tool, c.own, c.text); got != c.want {
			t.Errorf("Cluster(%q, %q, %q) = %q, want %q", c.tool, c.own, c.text, got, c.want)
		}
	}
	for name, bad := range map[string]string{
		"no kind":      "patterns: [{match: [x]}]",
		"no fix tool":  "patterns: [{kind: k, match: [x], fix: {args: {a: b}}}]",
		"bad template": "patterns: [{kind: k, match: [x], fix: {tool: t, args: {a: '{{ nope }}'}}}]",
		"unknown key":  "max_heal: 3",
	} {
		if _, err := healer.ParseRules(name, []byte(bad)); err == nil {
			t.Errorf("%s: ParseRules accepted %q", name, bad)
		}
	}
}

// ---- a healer that starts after the failure catches up ----

func TestHealerStartsAfterFailureUsesLearnedFix(t *testing.T) {
	s := newStack(t)
	mark := s.mark(t, "logged-out-stage")
	s.learner(t)
	s.router(t)
	// The runner waits long enough for a healer that is not there yet.
	s.runner(t, runner.Config{HealWait: 30 * time.Second})

	fixID := events.FixID("kube_get_deployment", "taught: login")
	ev, err := events.NewEvent(events.FixLearned, fixID, fixID+"/taught", "heed/cli", events.FixLearnedData{
		Tool: "kube_get_deployment", ErrorPattern: "taught: login", Match: "must be logged in",
		Description: "log in to stage, then retry", Action: &events.FixAction{Tool: "kube_login", Args: map[string]any{"cluster": "stage"}},
		Source: events.FixFromPerson, By: "person/ops",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.bus.Publish(ctxFor(t, 5*time.Second), &ev); err != nil {
		t.Fatal(err)
	}
	waitFix(t, s.bus, fixID, func(readmodel.Fix) error { return nil })

	file, src := skillFile(t, "scale_down.yaml")
	id := s.start(t, file, src, map[string]any{"name": "api"}, "")
	waitRun(t, s, id, 10*time.Second, events.RunStepFailed)

	// The healer comes up with the failure waiting for it: the first thing it
	// handles must already see the learned fixes.
	s.healer(t, healer.Config{})
	evs := waitRun(t, s, id, 20*time.Second, events.RunCompleted, events.HealHealed)
	tr := decode[events.HealTriggeredData](t, one(t, evs, events.HealTriggered))
	if tr.Plan != events.PlanLearnedFix || tr.Fix == nil || tr.Fix.FixID != fixID {
		t.Fatalf("heal.triggered = %+v (fix %+v), want the learned fix %s", tr, tr.Fix, fixID)
	}
	healed := decode[events.HealHealedData](t, one(t, evs, events.HealHealed))
	if healed.Via != events.PlanLearnedFix || healed.FixID != fixID {
		t.Errorf("heal.healed = %+v", healed)
	}
	none(t, evs, events.HealGaveUp)
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("the learned fix's kube_login did not run (stat: %v)", err)
	}
	waitFix(t, s.bus, fixID, func(f readmodel.Fix) error {
		if f.Healed != 1 || f.Confidence != 0.93 {
			return fmt.Errorf("fix after a heal: healed %d, confidence %v", f.Healed, f.Confidence)
		}
		return nil
	})
}
