package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
)

// samples is one valid instance of every event type, built from the Go
// data types: TestSamplesCoverCatalog checks they validate against their
// schemas, so the structs and the schemas cannot drift apart unnoticed.
func samples() map[events.Type]any {
	idx := 1
	risk := 0.95
	at := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	opts := []events.Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}}
	errInfo := events.ErrorInfo{Message: "manifest unknown: quay.io/app:abc1234", Kind: "exit"}
	return map[events.Type]any{
		events.RunRequested:     events.RunRequestedData{Skill: events.SkillRef{Name: "release", Source: "name: release\n", Digest: "sha256:" + strings.Repeat("0", 64)}, Inputs: map[string]any{"sha": "abc"}, RequestedBy: "user:alice"},
		events.RunStarted:       events.RunStartedData{Skill: "release", Driver: "runner", Steps: []string{"check"}},
		events.RunStepStarted:   events.StepStartedData{Step: "check", Index: 0, Attempt: 2, Kind: "tool", Tool: "quay_check", Args: map[string]any{"tag": "abc"}, RetryOf: "r1/s0/a1/failed"},
		events.RunStepCompleted: events.StepCompletedData{Step: "check", Index: 0, Attempt: 1, Output: map[string]any{"ok": true}},
		events.RunStepFailed:    events.StepFailedData{Step: "check", Index: 0, Attempt: 1, Tool: "quay_check", Error: errInfo},
		events.RunStepSkipped:   events.StepSkippedData{Step: "check", Index: 0, Reason: "condition is false"},
		events.RunPaused:        events.RunPausedData{Reason: events.PauseAwaitingConfirmation, Step: "confirm", Index: 1, ConfirmID: "r1-s1-a1"},
		events.RunResumed:       events.RunResumedData{Step: "confirm", Index: 1, Choice: "proceed", Method: events.MethodUser, By: "user:alice"},
		events.RunCompleted:     events.RunCompletedData{Summary: "released"},
		events.RunFailed:        events.RunFailedData{Step: "check", Index: &idx, Error: errInfo},
		events.RunCancelled:     events.RunCancelledData{By: "user:bob", Reason: "wrong target"},
		events.RunWarning:       events.RunWarningData{Step: "check", Index: 0, Tool: "quay_check", PatternID: "pat-0", Message: "fails for short tags"},
		events.HealTriggered:    events.HealTriggeredData{Step: "check", Index: 0, Attempt: 1, Tool: "quay_check", Error: errInfo, Classification: events.Classification{Kind: "not_found", Signature: "manifest unknown"}, Plan: events.PlanAgent},
		events.HealFixApplied:   events.HealFixAppliedData{Step: "check", Index: 0, Attempt: 1, Fix: events.FixRef{Tool: "kube_login"}, OK: true},
		events.HealRetried:      events.HealRetriedData{Step: "check", Index: 0, Attempt: 1, NextAttempt: 2, Args: map[string]any{"tag": "abc"}},
		events.HealHealed:       events.HealHealedData{Step: "check", Index: 0, Attempt: 2, Via: events.PlanAgent},
		events.HealGaveUp:       events.HealGaveUpData{Step: "check", Index: 0, Attempt: 1, Reason: "no fix"},
		events.HealEscalated:    events.HealEscalatedData{Step: "check", Index: 0, Attempt: 1, Agent: "agent/js", Context: map[string]any{"error": "x"}},
		events.FixLearned:       events.FixLearnedData{Tool: "quay_check", ErrorPattern: "manifest unknown", Description: "use the full sha", Source: events.FixFromAgent},
		events.FixForgotten:     events.FixForgottenData{By: "user:alice"},
		events.RunAbandoned:     events.RunAbandonedData{Reason: "no event for 48h0m0s", LastEventID: "r1/s0", LastEventAt: at, IdleMS: 172800000},
		events.ConfirmRequested: events.ConfirmRequestedData{Message: "Release?", Options: opts, Requester: "heed/runner", RunID: "r1"},
		events.ConfirmAnswered:  events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "user:alice", Channel: "cli"},
		events.ConfirmExpired:   events.ConfirmExpiredData{Deadline: at, Default: "cancel"},
		events.ConfirmDelegated: events.ConfirmDelegatedData{Agent: "agent/js", Message: "Release?", Options: opts, Deadline: at},
		events.ConfirmRefused:   events.ConfirmRefusedData{AnswerID: "a2", AnswerSeq: 7, Choice: "cancel", Method: events.MethodUser, By: "user:bob", Code: "already_answered", Reason: "already answered", Winner: &events.AnswerRef{EventID: "a1", Choice: "proceed", Method: events.MethodUser, By: "user:alice", At: at}},
		events.PrefSet:          events.PrefSetData{Scope: events.ScopeSkillStep, Skill: "release", Step: "confirm", Choice: "proceed", By: "user:alice"},
		events.PrefForgotten:    events.PrefForgottenData{By: "user:alice"},
		events.EscalationRequested: events.EscalationRequestedData{Session: "agent/s1", Operation: "force_push", Scope: "main", Environment: "prod", Risk: &risk, Requester: "agent/s1",
			Approvers: []string{"user:alice"}, Quorum: &events.Quorum{Required: 2, Veto: []string{"deny"}}},
		events.EscalationRouted: events.EscalationRoutedData{Decision: events.RouteEscalate, Risk: risk, RiskSource: events.RiskFromRule, RiskRule: "force_push", Confidence: 0.5, Critical: true,
			Rule: "critical", Reason: "CRITICAL: force_push (risk=95%)", Priority: 10, Tier: "top", Safeguards: &events.Safeguards{LogExtra: true}, Cache: &events.CacheEvidence{Count: 4, SuccessRate: 1, ConfidenceBoost: 0.2}},
		events.EscalationOffered:   events.EscalationOfferedData{Tier: "top", TierIndex: 2, Offer: 1, ConfirmID: "e1-o1", Members: []string{"user:alice"}, Deadline: at, TimeoutS: 300, Priority: 10},
		events.EscalationEscalated: events.EscalationEscalatedData{FromTier: "tier1", ToTier: "tier2", EscalationCount: 1, Reason: events.EscalateUnreachable, Tried: []string{"user:bob"}},
		events.EscalationDecided: events.EscalationDecidedData{Decision: events.EscalationApproved, Method: events.MethodUser, By: "user:alice", Channel: "slack", ConfirmID: "e1-o1",
			Votes: []events.EscalationVote{{Choice: "approve", By: "user:alice", At: at}}, HeldMS: 1200, Operation: "force_push", Scope: "main"},
		events.EscalationOutcome: events.EscalationOutcomeData{Outcome: events.OutcomeSuccess, By: "agent/s1", Operation: "force_push", Scope: "main", Decision: events.EscalationApproved},
		events.ChangeSetProposed: events.ChangeSetProposedData{Agent: "agent/laura", Subject: "task-42", Wake: "wake-7", ExpiresAt: at, ProposedBy: "agent/laura",
			Items: []events.ChangeItem{{Item: 1, Tool: "set_task_title", Args: map[string]any{"title": "Fix login bug"}, Summary: "Set title to Fix login bug", Before: map[string]any{"title": "login"}},
				{Item: 2, Tool: "add_checklist_item", Args: map[string]any{"title": "Write tests"}, Summary: "Add checklist item: Write tests", From: "add_multiple_checklist_items", Group: "Checklist items"}}},
		events.ChangeSetDecided: events.ChangeSetDecidedData{Decisions: []events.ChangeDecision{{Item: 1, Verdict: events.VerdictConfirmed}, {Item: 2, Verdict: events.VerdictRejected, Reason: "not needed"}}, By: "user:alice", Channel: "cli"},
		events.ChangeSetRefused: events.ChangeSetRefusedData{DecisionID: "d2", DecisionSeq: 9, By: "user:bob", Refused: []events.ChangeRefusal{{Item: 1, Verdict: events.VerdictRejected, Code: events.ChangeRefusedDecided, Reason: "already decided",
			Winner: &events.ChangeDecisionRef{EventID: "d1", Verdict: events.VerdictConfirmed, By: "user:alice", At: at}}}},
		events.ChangeSetExpired:     events.ChangeSetExpiredData{Items: []int{2}, ExpiresAt: at},
		events.ChangeApplyStarted:   events.ChangeApplyStartedData{Item: 1, Tool: "set_task_title", Args: map[string]any{"title": "Fix login bug"}, IdempotencyKey: events.ChangeIdempotencyKey("cs-1", 1), Attempt: 1},
		events.ChangeApplyCompleted: events.ChangeApplyCompletedData{Item: 1, Attempt: 1, Output: map[string]any{"ok": true}, DurationMS: 12},
		events.ChangeApplyFailed:    events.ChangeApplyFailedData{Item: 1, Attempt: 1, Error: events.ErrorInfo{Message: "the title changed since the proposal"}, Stale: true, DurationMS: 3},
	}
}

func TestSamplesCoverCatalog(t *testing.T) {
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	s := samples()
	for _, info := range events.Catalog() {
		d, ok := s[info.Type]
		if !ok {
			t.Errorf("no sample of %s", info.Type)
			continue
		}
		b, _ := json.Marshal(d)
		if err := v.Validate(info.Type, b); err != nil {
			t.Errorf("the Go type of %s writes what its schema refuses: %v", info.Type, err)
		}
	}
}

// TestSDKGoJetStreamReceiverReadsEveryType: sdk-go's own NATS JetStream
// protocol reads every heed event type as heed writes it, with every
// attribute and the data intact (datacontenttype is left out: JSON).
func TestSDKGoJetStreamReceiverReadsEveryType(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// One sdk-go receiver per event subject tree, as a reader of one kind
	// of event would use it.
	var mu sync.Mutex
	got := map[string]cloudevents.Event{}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, len(events.EventSubjects()))
	for _, subject := range events.EventSubjects() {
		p, err := cejs.NewConsumerFromConn(env.Conn(t), events.EventStream, subject, nil, []nats.SubOpt{nats.DeliverAll()})
		if err != nil {
			t.Fatal(err)
		}
		client, err := cloudevents.NewClient(p)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			done <- client.StartReceiver(rctx, func(e cloudevents.Event) {
				mu.Lock()
				got[e.ID()] = e
				mu.Unlock()
			})
		}()
	}

	sent := map[string]events.Type{}
	for typ, data := range samples() {
		id := "s-" + string(typ)
		ev, err := events.NewEvent(typ, "agg-1", id, "heed/test", data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bus.Publish(ctx, &ev); err != nil {
			t.Fatalf("publish %s: %v", typ, err)
		}
		sent[id] = typ
	}
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("sdk-go receiver stopped: %v", err)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) < len(sent) {
			return fmt.Errorf("sdk-go received %d of %d events", len(got), len(sent))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for id, typ := range sent {
		e, ok := got[id]
		if !ok {
			t.Errorf("sdk-go did not receive %s", typ)
			continue
		}
		// heed leaves datacontenttype out (always JSON); sdk-go reads its
		// absence as JSON (DataAs below).
		if e.DataContentType() != "" {
			t.Errorf("%s: sdk-go reads datacontenttype %q, want none", typ, e.DataContentType())
		}
		if e.Type() != string(typ) || e.Subject() != "agg-1" || e.Source() != "heed/test" || e.SpecVersion() != "1.0" || e.Time().IsZero() {
			t.Errorf("%s: sdk-go reads attributes type=%s subject=%s source=%s specversion=%s time=%s", typ, e.Type(), e.Subject(), e.Source(), e.SpecVersion(), e.Time())
		}
		var back map[string]any
		if err := e.DataAs(&back); err != nil {
			t.Errorf("%s: sdk-go cannot decode the data as JSON: %v", typ, err)
		}
		want, _ := json.Marshal(samples()[typ])
		var wantMap map[string]any
		_ = json.Unmarshal(want, &wantMap)
		if b1, b2 := mustJSON(back), mustJSON(wantMap); b1 != b2 {
			t.Errorf("%s: data %s, want %s", typ, b1, b2)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
