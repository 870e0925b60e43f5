package escalator_test

// End-to-end tests of the escalator against a real embedded nats-server:
// the escalator and the confirm router each run with their own runtime, as
// separate processes would, and talk only through events.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/service/servicetest"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/escalator"
	"github.com/nats-io/nats.go"
)

type stack struct {
	env *eventstest.Env
	bus *events.Bus
	nc  *nats.Conn
}

// start runs the confirm router and the escalator with config yaml ("":
// the default config).
func start(t *testing.T, yaml string) *stack {
	t.Helper()
	env := eventstest.Start(t)
	cfg := ""
	if yaml != "" {
		cfg = filepath.Join(t.TempDir(), "escalation.yaml")
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	servicetest.Start(t, env, "confirm-router", func(ctx context.Context, rt *service.Runtime) error {
		return confirm.Run(ctx, rt, confirm.Config{})
	})
	servicetest.Start(t, env, "escalator", func(ctx context.Context, rt *service.Runtime) error {
		// Presence replies come from this test's own connection: on a
		// loaded machine later than the 250 ms a service waits by default.
		return escalator.Run(ctx, rt, escalator.Config{ConfigFile: cfg, PresenceTimeout: 2 * time.Second})
	})
	s := &stack{env: env, bus: env.Bus(t), nc: env.Conn(t)}
	// Ready when it answers its commands (and the router its own).
	eventstest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if err := command.Call(ctxT(t), s.nc, command.EscalationHeld, command.HeldRequest{}, &command.HeldReply{}); err != nil {
			return err
		}
		err := command.Call(ctxT(t), s.nc, command.ConfirmAnswer, command.AnswerConfirmation{ID: "nothing", Choice: "x", By: "t"}, &command.AnswerReply{})
		if events.CodeOf(err) == events.CodeUnavailable {
			return err
		}
		return nil
	})
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ptr(v float64) *float64 { return &v }

// present answers identity's presence requests (its client is there, on
// channels) until the test ends.
func (s *stack) present(t *testing.T, identity string, channels ...string) {
	t.Helper()
	sub, err := s.nc.Subscribe(events.PresenceSubject(identity), func(m *nats.Msg) {
		b, _ := json.Marshal(events.PresenceReply{Identity: identity, Channels: channels})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (s *stack) request(t *testing.T, req command.RequestEscalation) command.EscalationReply {
	t.Helper()
	var out command.EscalationReply
	if err := command.Call(ctxT(t), s.nc, command.EscalationRequest, req, &out); err != nil {
		t.Fatalf("request %+v: %v", req, err)
	}
	return out
}

func (s *stack) held(t *testing.T, session string) command.HeldReply {
	t.Helper()
	var out command.HeldReply
	if err := command.Call(ctxT(t), s.nc, command.EscalationHeld, command.HeldRequest{Session: session}, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// history is every stored event on filter, in log order.
func (s *stack) history(t *testing.T, filter string) []*events.Event {
	t.Helper()
	var out []*events.Event
	_, err := events.ReadHistory(ctxT(t), s.bus.JetStream(), events.EventStream, filter, 0, func(raw events.RawMsg) error {
		ev, err := s.bus.Codec().DecodeStored(raw)
		if err != nil {
			return err
		}
		out = append(out, ev)
		return nil
	})
	if err != nil && events.CodeOf(err) != events.CodeNotFound {
		t.Fatal(err)
	}
	return out
}

func count(evs []*events.Event, typ events.Type) int {
	n := 0
	for _, ev := range evs {
		if events.Type(ev.Type()) == typ {
			n++
		}
	}
	return n
}

func last[T any](t *testing.T, evs []*events.Event, typ events.Type) T {
	t.Helper()
	var out T
	found := false
	for _, ev := range evs {
		if events.Type(ev.Type()) == typ {
			found = true
			var zero T
			out = zero
			if err := json.Unmarshal(ev.Data(), &out); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !found {
		t.Fatalf("no %s in %d events", typ, len(evs))
	}
	return out
}

func types(evs []*events.Event) string {
	var s []string
	for _, ev := range evs {
		s = append(s, strings.TrimPrefix(ev.Type(), "heed.escalation."))
	}
	return strings.Join(s, " ")
}

// The seed: a high-risk operation goes to the top tier with priority 10,
// and the agent gets its answer at once (held), not a wait.
func TestHighRiskRoutesToTopWithPriority10(t *testing.T) {
	s := start(t, "")
	r := s.request(t, command.RequestEscalation{ID: "e-high", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s1", Operation: "force_push", Scope: "main", Risk: ptr(0.95), Confidence: ptr(0.8)}})
	if r.Status != events.EscalationHeld || r.Routed.Decision != events.RouteEscalate || r.Routed.Tier != "top" || r.Routed.Priority != 10 || !r.Routed.Critical || r.Routed.Rule != "critical" {
		t.Fatalf("reply %+v", r)
	}
	if !strings.HasPrefix(r.Routed.Reason, "CRITICAL: force_push (risk=95%") {
		t.Errorf("reason %q", r.Routed.Reason)
	}
	if r.Offer == nil || r.Offer.Tier != "top" || r.Offer.ConfirmID != "e-high-o1" {
		t.Fatalf("offer %+v", r.Offer)
	}
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := len(s.history(t, events.SubjectFilter("confirm", "e-high-o1"))); n == 0 {
			return fmt.Errorf("no confirmation e-high-o1")
		}
		return nil
	})
	req := last[events.ConfirmRequestedData](t, s.history(t, events.SubjectFilter("confirm", "e-high-o1")), events.ConfirmRequested)
	if !strings.Contains(req.Message, "PERMISSION ESCALATION REQUEST") || !strings.Contains(req.Message, "force_push") || req.Default != "deny" || len(req.Options) != 2 {
		t.Errorf("confirmation %+v", req)
	}
	// The same id and content: the same escalation; other content: conflict.
	if again := s.request(t, command.RequestEscalation{ID: "e-high", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s1", Operation: "force_push", Scope: "main", Risk: ptr(0.95), Confidence: ptr(0.8)}}); again.Offer == nil || again.Offer.ConfirmID != "e-high-o1" {
		t.Errorf("repeated request: %+v", again)
	}
	err := command.Call(ctxT(t), s.nc, command.EscalationRequest, command.RequestEscalation{ID: "e-high", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s1", Operation: "deploy"}}, &command.EscalationReply{})
	if events.CodeOf(err) != events.CodeConflict {
		t.Errorf("different content: %v, want conflict", err)
	}
	if evs := s.history(t, events.SubjectFilter("escalation", "e-high")); count(evs, events.EscalationOffered) != 1 || count(evs, events.EscalationRequested) != 1 {
		t.Errorf("events: %s", types(evs))
	}
}

// The seed's session rule, through the command: 3 held may go on, 4 may
// not, one critical may not.
func TestSessionRule(t *testing.T) {
	s := start(t, "")
	for i := range 4 {
		s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/a", Operation: "deploy", Scope: fmt.Sprint("svc", i), Risk: ptr(0.6), Confidence: ptr(0.8)}})
		h := s.held(t, "agent/a")
		if h.Held != i+1 {
			t.Fatalf("after %d requests: held %d", i+1, h.Held)
		}
		if want := i+1 <= 3; h.CanContinue != want {
			t.Errorf("%d held: can_continue %v (%s)", i+1, h.CanContinue, h.Reason)
		}
		if i == 3 && h.Reason != "4 requests held (more than 3)" {
			t.Errorf("reason %q", h.Reason)
		}
	}
	s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/b", Operation: "drop_table", Risk: ptr(0.95)}})
	h := s.held(t, "agent/b")
	if h.CanContinue || h.Critical != 1 || !strings.Contains(h.Reason, "critical") || !strings.Contains(h.Reason, "drop_table") {
		t.Errorf("critical held: %+v", h)
	}
	if h := s.held(t, "agent/nobody"); !h.CanContinue || h.Held != 0 {
		t.Errorf("idle session: %+v", h)
	}
	if all := s.held(t, ""); len(all.Sessions) != 2 || all.Held != 5 {
		t.Errorf("every session: %+v", all)
	}
}

const tiersYAML = `tiers:
  - {name: tier1, timeout: 1s}
  - {name: tier2, timeout: 1s}
  - {name: top, timeout: 30s}
`

// A tier's deadline moves the request to the next tier, once.
func TestTierTimeoutEscalates(t *testing.T) {
	s := start(t, tiersYAML)
	r := s.request(t, command.RequestEscalation{ID: "e-t", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s", Operation: "deploy", Risk: ptr(0.6), Confidence: ptr(0.8)}})
	if r.Routed.Tier != "tier1" || r.Routed.Priority != 8 {
		t.Fatalf("%+v", r)
	}
	filter := events.SubjectFilter("escalation", "e-t")
	eventstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if evs := s.history(t, filter); count(evs, events.EscalationOffered) < 3 {
			return fmt.Errorf("events: %s", types(evs))
		}
		// The offer's confirmation is written after the offer.
		if count(s.history(t, events.SubjectFilter("confirm", "e-t-o3")), events.ConfirmRequested) == 0 {
			return errors.New("the top tier's confirmation is not written yet")
		}
		return nil
	})
	evs := s.history(t, filter)
	if got := types(evs); got != "requested routed offered escalated offered escalated offered" {
		t.Fatalf("events: %s", got)
	}
	esc := last[events.EscalationEscalatedData](t, evs, events.EscalationEscalated)
	if esc.Reason != events.EscalateTimeout || esc.FromTier != "tier2" || esc.ToTier != "top" || esc.EscalationCount != 2 {
		t.Errorf("escalated %+v", esc)
	}
	off := last[events.EscalationOfferedData](t, evs, events.EscalationOffered)
	if off.Tier != "top" || off.ConfirmID != "e-t-o3" || off.EscalationCount != 2 {
		t.Errorf("offered %+v", off)
	}
	if n := count(s.history(t, events.SubjectFilter("confirm", "e-t-o3")), events.ConfirmRequested); n != 1 {
		t.Errorf("%d requests of the top tier's confirmation", n)
	}
}

// aliceThenBob: tier1 is alice on slack, tier2 bob at his terminal, then
// the top tier.
const aliceThenBob = `tiers:
  - name: tier1
    members: [{id: "user:alice", channels: [slack]}]
  - name: tier2
    members: [{id: "user:bob", channels: [terminal]}]
  - {name: top}
`

// A tier whose members are all absent escalates at once; a present member
// approves and the decision names them.
func TestUnreachableTierThenMemberApproves(t *testing.T) {
	s := start(t, aliceThenBob)
	// bob is present (his terminal answers presence requests); alice is not.
	s.present(t, "user:bob", "terminal")
	r := s.request(t, command.RequestEscalation{ID: "e-u", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s", Operation: "deploy", Risk: ptr(0.6), Confidence: ptr(0.8)}})
	if r.Offer == nil || r.Offer.Tier != "tier2" || r.Offer.ConfirmID != "e-u-o1" {
		t.Fatalf("reply %+v", r)
	}
	evs := s.history(t, events.SubjectFilter("escalation", "e-u"))
	esc := last[events.EscalationEscalatedData](t, evs, events.EscalationEscalated)
	if esc.Reason != events.EscalateUnreachable || esc.FromTier != "tier1" || esc.ToTier != "tier2" || len(esc.Tried) != 1 || esc.Tried[0] != "user:alice" {
		t.Errorf("escalated %+v", esc)
	}
	// alice may not answer tier2's offer; bob may.
	var ans command.AnswerReply
	err := command.Call(ctxT(t), s.nc, command.ConfirmAnswer, command.AnswerConfirmation{ID: "e-u-o1", Choice: "approve", By: "user:alice"}, &ans)
	if err == nil {
		t.Errorf("alice's answer was taken: %+v", ans)
	}
	if err := command.Call(ctxT(t), s.nc, command.ConfirmAnswer, command.AnswerConfirmation{ID: "e-u-o1", Choice: "approve", By: "user:bob", Channel: "terminal"}, &ans); err != nil {
		t.Fatal(err)
	}
	var st command.EscalationState
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := command.Call(ctxT(t), s.nc, command.EscalationStatus, command.EscalationStatusRequest{ID: "e-u"}, &st); err != nil {
			return err
		}
		if st.Decided == nil {
			return fmt.Errorf("not decided: %s", st.Status)
		}
		return nil
	})
	if d := st.Decided; d.Decision != events.EscalationApproved || d.By != "user:bob" || d.Method != events.MethodUser || d.Channel != "terminal" || d.Tier != "tier2" {
		t.Errorf("decided %+v", d)
	}
	if h := s.held(t, "agent/s"); h.Held != 0 {
		t.Errorf("still held: %+v", h)
	}
	// The outcome, once.
	var out command.OutcomeReply
	if err := command.Call(ctxT(t), s.nc, command.EscalationOutcome, command.ReportOutcome{ID: "e-u", Outcome: events.OutcomeSuccess}, &out); err != nil {
		t.Fatal(err)
	}
	if err := command.Call(ctxT(t), s.nc, command.EscalationOutcome, command.ReportOutcome{ID: "e-u", Outcome: events.OutcomeFailure}, &out); events.CodeOf(err) != events.CodeConflict {
		t.Errorf("second outcome: %v", err)
	}
}

// A request asked again (its caller timed out, or retries) gets the same
// answer from the log: it is not decided again, so its tier's members are
// not asked for their presence again (a silent member costs the presence
// timeout); other content under the same id is a conflict.
func TestRetriedRequestIsReadNotDecidedAgain(t *testing.T) {
	s := start(t, aliceThenBob)
	// alice's client hears presence requests and never answers; bob is there.
	var askedAlice atomic.Int32
	quiet, err := s.nc.Subscribe(events.PresenceSubject("user:alice"), func(*nats.Msg) { askedAlice.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = quiet.Unsubscribe() }()
	s.present(t, "user:bob", "terminal")
	req := command.RequestEscalation{ID: "e-retry", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s", Operation: "deploy", Risk: ptr(0.6), Confidence: ptr(0.8)}}
	first := s.request(t, req)
	if first.Offer == nil || first.Offer.Tier != "tier2" {
		t.Fatalf("first reply %+v", first)
	}
	if n := askedAlice.Load(); n != 1 {
		t.Fatalf("alice asked %d times for the first request, want 1", n)
	}
	again := s.request(t, req)
	if again.Offer == nil || again.Offer.ConfirmID != first.Offer.ConfirmID || again.Status != first.Status {
		t.Errorf("the retry's reply %+v, want the first's %+v", again, first)
	}
	if n := askedAlice.Load(); n != 1 {
		t.Errorf("alice asked %d times after the retry, want 1: the retry was decided again", n)
	}
	evs := s.history(t, events.SubjectFilter("escalation", "e-retry"))
	if n := count(evs, events.EscalationRequested); n != 1 {
		t.Errorf("%d requested events, want 1", n)
	}
	other := req
	other.Operation = "drop-database"
	var r command.EscalationReply
	if err := command.Call(ctxT(t), s.nc, command.EscalationRequest, other, &r); events.CodeOf(err) != events.CodeConflict {
		t.Errorf("other content under the id: %v, want conflict", err)
	}
}

// After the last tier the final action applies (deny by default).
func TestFinalActionAfterLastTier(t *testing.T) {
	s := start(t, "tiers:\n  - {name: only, timeout: 1s}\nrouting:\n  - {name: everything, tier: only, priority: 5}\n")
	s.request(t, command.RequestEscalation{ID: "e-f", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s", Operation: "deploy"}})
	var st command.EscalationState
	eventstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if err := command.Call(ctxT(t), s.nc, command.EscalationStatus, command.EscalationStatusRequest{ID: "e-f"}, &st); err != nil {
			return err
		}
		if st.Decided == nil {
			return fmt.Errorf("not decided")
		}
		return nil
	})
	if d := st.Decided; d.Decision != events.EscalationDenied || d.Method != events.EscMethodFinalAction || d.By != escalator.Actor {
		t.Errorf("decided %+v", d)
	}
}

// Conditional auto-approve records its safeguards and gives them to the
// agent; a risk rule scores an operation without risk and is recorded.
func TestAutoApproveSafeguardsAndRiskRule(t *testing.T) {
	s := start(t, `risk_rules:
  - {name: force_push, when: 'operation == "force_push"', risk: 0.95, confidence: 0.9}
  - {name: edits, when: 'operation == "file_edit"', risk: 0.2, confidence: 0.8}
`)
	r := s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s", Operation: "file_edit", Scope: "/tmp/x.txt"}})
	if r.Status != events.EscalationApproved || r.Routed.Decision != events.RouteConditionalApprove || r.Routed.Rule != "safe_paths" ||
		r.Safeguards == nil || !r.Safeguards.LogExtra || !r.Safeguards.Monitor || r.Routed.RiskRule != "edits" {
		t.Fatalf("reply %+v", r)
	}
	dec := last[events.EscalationDecidedData](t, s.history(t, events.SubjectFilter("escalation", r.ID)), events.EscalationDecided)
	if dec.Method != events.EscMethodRule || dec.Safeguards == nil || !dec.Safeguards.Monitor {
		t.Errorf("decided %+v", dec)
	}
	r = s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s", Operation: "force_push", Scope: "main"}})
	if r.Routed.RiskSource != events.RiskFromRule || r.Routed.RiskRule != "force_push" || r.Routed.Risk != 0.95 || r.Routed.Tier != "top" {
		t.Errorf("routed %+v", r.Routed)
	}
	// Without a rule: the default score, recorded as such.
	r = s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s", Operation: "mystery"}})
	if r.Routed.RiskSource != events.RiskDefault || r.Routed.Risk != 0.5 || r.Routed.Tier != "tier1" {
		t.Errorf("routed %+v", r.Routed)
	}
}

// The learner's decision cache (heed_decisions) approves a candidate with
// its confidence boost; never a critical operation.
func TestLearnedCacheApproves(t *testing.T) {
	s := start(t, "")
	kv, err := s.bus.JetStream().KeyValue(ctxT(t), readmodel.DecisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []readmodel.Decision{
		{Operation: "deploy", Scope: "staging", Count: 4, Approved: 4, Successes: 4, SuccessRate: 1, Candidate: true, ConfidenceBoost: 0.2},
		{Operation: "force_push", Scope: "main", Count: 9, Approved: 9, Successes: 9, SuccessRate: 1, Candidate: true, ConfidenceBoost: 0.3},
	} {
		b, _ := json.Marshal(map[string]any{"seq": 1, "value": d})
		if _, err := kv.Put(ctxT(t), readmodel.DecisionKey(d.Operation, d.Scope), b); err != nil {
			t.Fatal(err)
		}
	}
	var r command.EscalationReply
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		r = s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/c", Operation: "deploy", Scope: "staging", Risk: ptr(0.6), Confidence: ptr(0.6)}})
		if r.Routed.Decision != events.RouteCachedApprove {
			return fmt.Errorf("routed %+v", r.Routed)
		}
		return nil
	})
	if r.Status != events.EscalationApproved || r.Routed.Cache == nil || r.Routed.Cache.Count != 4 || r.Routed.Confidence < 0.79 {
		t.Errorf("reply %+v", r)
	}
	r = s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/c", Operation: "force_push", Scope: "main", Risk: ptr(0.95)}})
	if r.Routed.Decision != events.RouteEscalate || r.Routed.Tier != "top" {
		t.Errorf("critical was cached: %+v", r.Routed)
	}
}

// The cache is read per environment: what was learned on stage approves
// stage, not the same operation and scope in production.
func TestLearnedCachePerEnvironment(t *testing.T) {
	s := start(t, "")
	kv, err := s.bus.JetStream().KeyValue(ctxT(t), readmodel.DecisionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	d := readmodel.Decision{Operation: "deploy", Environment: "stage", Scope: "service:api", Count: 6, Approved: 6, Successes: 6, SuccessRate: 1, Candidate: true, ConfidenceBoost: 0.3}
	b, _ := json.Marshal(map[string]any{"seq": 1, "value": d})
	if _, err := kv.Put(ctxT(t), readmodel.EscalationDecisionKey(d.Operation, d.Environment, d.Scope), b); err != nil {
		t.Fatal(err)
	}
	ask := func(env string) command.EscalationReply {
		return s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/e", Operation: "deploy", Scope: "service:api", Environment: env, Risk: ptr(0.8), Confidence: ptr(0.8)}})
	}
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if r := ask("stage"); r.Routed.Decision != events.RouteCachedApprove {
			return fmt.Errorf("stage routed %+v", r.Routed)
		}
		return nil
	})
	if r := ask("prod"); r.Routed.Decision != events.RouteEscalate || r.Status != events.EscalationHeld {
		t.Errorf("prod, learned on stage only: routed %+v, status %s; want escalate, held", r.Routed, r.Status)
	}
	if r := ask(""); r.Routed.Decision != events.RouteEscalate {
		t.Errorf("no environment, learned on stage only: routed %+v; want escalate", r.Routed)
	}
}

// heed replay rebuilds heed_escalations identically: summaries and the
// sessions' held lists (one session emptied by a decision, one still held).
func TestReplayRebuildsEscalations(t *testing.T) {
	s := start(t, "")
	s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/r", Operation: "file_edit", Scope: "/tmp/a", Risk: ptr(0.1), Confidence: ptr(0.9)}})
	s.request(t, command.RequestEscalation{EscalationRequestedData: events.EscalationRequestedData{Session: "agent/r", Operation: "deploy", Risk: ptr(0.6), Confidence: ptr(0.8)}})
	s.request(t, command.RequestEscalation{ID: "e-r", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/q", Operation: "force_push", Risk: ptr(0.95)}})
	if err := command.Call(ctxT(t), s.nc, command.ConfirmAnswer, command.AnswerConfirmation{ID: "e-r-o1", Choice: "approve", By: "user:x"}, &command.AnswerReply{}); err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if count(s.history(t, events.SubjectFilter("escalation", "e-r")), events.EscalationDecided) == 0 {
			return fmt.Errorf("e-r not decided")
		}
		return nil
	})
	rep, err := events.Replay(ctxT(t), s.bus, &escalator.Projection{}, events.DefaultTopology())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Identical() || rep.Keys != 4 { // three esc.<id>, one session.<token> (agent/r's deploy)
		t.Errorf("replay: %+v", rep)
	}
}

// A quorum rule for critical requests: of three top-tier members, two
// must approve; the first vote decides nothing, the second decides once
// with both votes, a third is refused.
func TestQuorumOfTopTier(t *testing.T) {
	s := start(t, `tiers:
  - {name: tier1}
  - {name: tier2}
  - name: top
    members: [{id: "user:a"}, {id: "user:b"}, {id: "user:c"}]
quorum:
  - {name: critical_two, when: critical, required: 2, veto: true}
`)
	for _, m := range []string{"user:a", "user:b", "user:c"} {
		sub, err := s.nc.Subscribe(events.PresenceSubject(m), func(msg *nats.Msg) { _ = msg.Respond([]byte(`{"identity":"x","channels":["web"]}`)) })
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	r := s.request(t, command.RequestEscalation{ID: "e-q", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/q", Operation: "drop_table", Risk: ptr(0.97)}})
	if r.Routed.Quorum == nil || r.Routed.Quorum.Required != 2 || r.Offer == nil || r.Offer.ConfirmID != "e-q-o1" {
		t.Fatalf("reply %+v", r)
	}
	var ans command.AnswerReply
	if err := command.Call(ctxT(t), s.nc, command.ConfirmAnswer, command.AnswerConfirmation{ID: "e-q-o1", Choice: "approve", By: "user:a", Channel: "web"}, &ans); err != nil || !ans.Counted {
		t.Fatalf("first vote: %+v %v", ans, err)
	}
	if st := s.history(t, events.SubjectFilter("escalation", "e-q")); count(st, events.EscalationDecided) != 0 {
		t.Fatalf("decided on one vote: %s", types(st))
	}
	if err := command.Call(ctxT(t), s.nc, command.ConfirmAnswer, command.AnswerConfirmation{ID: "e-q-o1", Choice: "approve", By: "user:b", Channel: "slack"}, &ans); err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if count(s.history(t, events.SubjectFilter("escalation", "e-q")), events.EscalationDecided) == 0 {
			return fmt.Errorf("not decided")
		}
		return nil
	})
	if err := command.Call(ctxT(t), s.nc, command.ConfirmAnswer, command.AnswerConfirmation{ID: "e-q-o1", Choice: "deny", By: "user:c"}, &ans); err == nil {
		t.Errorf("a vote after the quorum was taken: %+v", ans)
	}
	evs := s.history(t, events.SubjectFilter("escalation", "e-q"))
	d := last[events.EscalationDecidedData](t, evs, events.EscalationDecided)
	if count(evs, events.EscalationDecided) != 1 || d.Decision != events.EscalationApproved || d.By != "user:b" || len(d.Votes) != 2 {
		t.Errorf("decided %+v (%s)", d, types(evs))
	}
}

// An offer's confirmation goes in the batch of its offered event, guarded
// by "no such confirmation yet". One written before by someone else (an
// outside client on heed.>) stops that batch at it: the escalation's
// events before it stand, the confirmation there is kept and not written
// again, and the request is answered with its offer.
func TestOfferWhoseConfirmationExistsAlready(t *testing.T) {
	s := start(t, tiersYAML)
	cid := events.ConfirmIDOfOffer("e-x", 1)
	pre, err := events.NewEvent(events.ConfirmRequested, cid, cid+"/requested-by-someone", "agent/other",
		events.ConfirmRequestedData{Message: "written first", Options: []events.Option{{Label: "Yes", Value: "yes"}}, Requester: "agent/other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.bus.Publish(ctxT(t), &pre); err != nil {
		t.Fatal(err)
	}
	r := s.request(t, command.RequestEscalation{ID: "e-x", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s", Operation: "deploy", Risk: ptr(0.6), Confidence: ptr(0.8)}})
	if r.Offer == nil || r.Offer.ConfirmID != cid {
		t.Fatalf("reply %+v, want the offer of %s", r, cid)
	}
	if got := types(s.history(t, events.SubjectFilter("escalation", "e-x"))); got != "requested routed offered" {
		t.Errorf("escalation events: %s", got)
	}
	confirms := s.history(t, events.SubjectFilter("confirm", cid))
	if n := count(confirms, events.ConfirmRequested); n != 1 || confirms[0].ID() != pre.ID() {
		t.Errorf("the confirmation's requests: %d, first %s; want the one written before, alone", n, confirms[0].ID())
	}
}

// What an offer could not show or ask is refused at once, not offered,
// denied by the router's error answer and learned as a person's denial.
func TestRequestsAnOfferCannotAskAreRefused(t *testing.T) {
	s := start(t, "")
	for name, c := range map[string]struct {
		data events.EscalationRequestedData
		want string
	}{
		"a bell in the session":         {events.EscalationRequestedData{Session: "agent/s\u0007", Operation: "deploy"}, "session contains control characters"},
		"an escape in the operation":    {events.EscalationRequestedData{Session: "agent/s1", Operation: "deploy\u001b[2J"}, "operation contains control characters"},
		"a line break in the operation": {events.EscalationRequestedData{Session: "agent/s1", Operation: "deploy\nRisk:        0% (approved)"}, "operation contains control characters"},
		"a direction mark in the scope": {events.EscalationRequestedData{Session: "agent/s1", Operation: "deploy", Scope: "main\u202egnp.exe"}, "scope contains control characters"},
		"a veto that is no option":      {events.EscalationRequestedData{Session: "agent/s1", Operation: "deploy", Quorum: &events.Quorum{Required: 2, Veto: []string{"nope"}}}, "veto nope is not one of the options"},
		"more votes than approvers": {events.EscalationRequestedData{Session: "agent/s1", Operation: "deploy", Approvers: []string{"user:a", "user:b"}, Quorum: &events.Quorum{Required: 3}},
			"quorum.required is 3 but only 2 approvers are named"},
	} {
		err := command.Call(ctxT(t), s.nc, command.EscalationRequest, command.RequestEscalation{EscalationRequestedData: c.data}, &command.EscalationReply{})
		if events.CodeOf(err) != events.CodeInvalidRequest || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want invalid_request: %s", name, err, c.want)
		}
	}
	if evs := s.history(t, "heed.escalation.>"); len(evs) != 0 {
		t.Errorf("refused requests wrote %s", types(evs))
	}
	// A long message is offered cut, not refused by the router.
	r := s.request(t, command.RequestEscalation{ID: "e-long", EscalationRequestedData: events.EscalationRequestedData{Session: "agent/s1", Operation: "deploy", Risk: ptr(0.5), Message: strings.Repeat("m", 8000)}})
	if r.Status != events.EscalationHeld {
		t.Fatalf("a long message: %+v", r)
	}
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := len(s.history(t, events.SubjectFilter("confirm", "e-long-o1"))); n == 0 {
			return fmt.Errorf("no confirmation e-long-o1")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if evs := s.history(t, events.SubjectFilter("escalation", "e-long")); count(evs, events.EscalationDecided) != 0 {
		t.Errorf("the long message's escalation was decided: %s: %s", types(evs), evs[len(evs)-1].Data())
	}
}
