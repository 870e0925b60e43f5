package events

import "sort"

// Type is a CloudEvents type. Every type has the form heed.<kind>.<verb>
// where verb may itself contain dots (heed.run.step.failed).
type Type string

// Run events: one aggregate per run, subject heed.run.<run-id>.<verb>.
const (
	RunRequested     Type = "heed.run.requested"
	RunStarted       Type = "heed.run.started"
	RunStepStarted   Type = "heed.run.step.started"
	RunStepCompleted Type = "heed.run.step.completed"
	RunStepFailed    Type = "heed.run.step.failed"
	RunStepSkipped   Type = "heed.run.step.skipped"
	RunPaused        Type = "heed.run.paused"
	RunResumed       Type = "heed.run.resumed"
	RunCompleted     Type = "heed.run.completed"
	RunFailed        Type = "heed.run.failed"
	RunCancelled     Type = "heed.run.cancelled"
	RunAbandoned     Type = "heed.run.abandoned"
	RunWarning       Type = "heed.run.warning"
)

// Heal events: the healer's stages on a failed step, in the run's aggregate.
const (
	HealTriggered  Type = "heed.run.heal.triggered"
	HealFixApplied Type = "heed.run.heal.fix_applied"
	HealRetried    Type = "heed.run.heal.retried"
	HealHealed     Type = "heed.run.heal.healed"
	HealGaveUp     Type = "heed.run.heal.gave_up"
	HealEscalated  Type = "heed.run.heal.escalated"
)

// Fix events: one aggregate per learned fix, subject heed.fix.<fix-id>.<verb>.
const (
	FixLearned   Type = "heed.fix.learned"
	FixForgotten Type = "heed.fix.forgotten"
)

// Confirmation events: one aggregate per confirmation, subject
// heed.confirm.<confirm-id>.<verb>.
const (
	ConfirmRequested Type = "heed.confirm.requested"
	ConfirmAnswered  Type = "heed.confirm.answered"
	ConfirmExpired   Type = "heed.confirm.expired"
	ConfirmDelegated Type = "heed.confirm.delegated"
	ConfirmRefused   Type = "heed.confirm.refused"
)

// Preference events: one aggregate per remembered choice, subject
// heed.pref.<pref-id>.<verb>.
const (
	PrefSet       Type = "heed.pref.set"
	PrefForgotten Type = "heed.pref.forgotten"
)

// Escalation events: one aggregate per escalation request of an agent
// session, subject heed.escalation.<esc-id>.<verb> (docs/ESCALATIONS.md).
const (
	EscalationRequested Type = "heed.escalation.requested"
	EscalationRouted    Type = "heed.escalation.routed"
	EscalationOffered   Type = "heed.escalation.offered"
	EscalationEscalated Type = "heed.escalation.escalated"
	EscalationDecided   Type = "heed.escalation.decided"
	EscalationOutcome   Type = "heed.escalation.outcome"
)

// Change-set events: one aggregate per change set an agent wake (or a run)
// proposed, subject heed.changeset.<set-id>.<verb> (docs/CHANGESETS.md).
const (
	ChangeSetProposed    Type = "heed.changeset.proposed"
	ChangeSetDecided     Type = "heed.changeset.decided"
	ChangeSetRefused     Type = "heed.changeset.refused"
	ChangeSetExpired     Type = "heed.changeset.expired"
	ChangeApplyStarted   Type = "heed.changeset.apply.started"
	ChangeApplyCompleted Type = "heed.changeset.apply.completed"
	ChangeApplyFailed    Type = "heed.changeset.apply.failed"
)

// TypeInfo describes one event type for the catalog (docs/EVENTS.md is
// checked against it and against schemas/ by a test).
type TypeInfo struct {
	Type      Type
	Producers []string
	Consumers []string
	Summary   string
}

// Catalog lists every event type heed knows. An event of any other type is
// refused on publish and dead-lettered on consume.
var catalog = []TypeInfo{
	{RunRequested, []string{"runner"}, []string{"runner", "indexer"}, "a run command was accepted; carries the skill source"},
	{RunStarted, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a run started (driver runner or agent)"},
	{RunStepStarted, []string{"runner", "agent"}, []string{"runner", "indexer"}, "an attempt of a step started"},
	{RunStepCompleted, []string{"runner", "agent"}, []string{"runner", "indexer"}, "an attempt of a step completed with its output"},
	{RunStepFailed, []string{"runner", "agent"}, []string{"runner", "indexer"}, "an attempt of a step failed with its error"},
	{RunStepSkipped, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a step's condition was false"},
	{RunPaused, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a run waits for a confirmation or its agent"},
	{RunResumed, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a paused run continues with the answer it waited for (also before run.cancelled when the answer was cancel: the run's own log holds every answer it acted on)"},
	{RunCompleted, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a run finished successfully"},
	{RunFailed, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a run stopped on an error"},
	{RunCancelled, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a run was cancelled"},
	{RunAbandoned, []string{"runner (its sweep)"}, []string{"runner", "indexer", "learner"}, "a run had no event for the idle time (runner --abandon-after) and ended; events after it change nothing"},
	{RunWarning, []string{"runner"}, []string{"indexer", "cli"}, "a tool call matches an active learned failure pattern"},
	{HealTriggered, []string{"healer"}, []string{"runner", "learner", "indexer"}, "the healer took up a failed step: classification and plan"},
	{HealFixApplied, []string{"healer"}, []string{"learner", "indexer"}, "a fix ran (a login, a reconnect) or corrected args were computed"},
	{HealRetried, []string{"healer"}, []string{"runner", "indexer"}, "the healer asked for the next attempt with these args"},
	{HealHealed, []string{"healer"}, []string{"learner", "indexer"}, "the attempt after a fix succeeded"},
	{HealGaveUp, []string{"healer", "runner"}, []string{"runner", "learner", "indexer"}, "the healer cannot heal it; on_error applies"},
	{HealEscalated, []string{"healer"}, []string{"runner", "agents", "learner", "indexer"}, "the failure was handed to the run's agent"},
	{FixLearned, []string{"healer", "cli"}, []string{"learner", "indexer"}, "a fix for a tool failure was learned (from an agent) or taught (by a person)"},
	{FixForgotten, []string{"cli"}, []string{"learner", "indexer"}, "a learned fix was revoked"},
	{ConfirmRequested, []string{"runner", "confirm-router", "escalator", "agent"}, []string{"confirm-router", "channels", "indexer"}, "a question with options awaits an answer"},
	{ConfirmAnswered, []string{"confirm-router", "runner", "agent"}, []string{"runner", "confirm-router", "escalator", "learner", "indexer"}, "an answer to a confirmation; the first valid one in log order takes effect"},
	{ConfirmExpired, []string{"confirm-router (when the deadline's schedule fires)", "agent"}, []string{"confirm-router", "runner", "escalator", "indexer"}, "a confirmation reached its deadline"},
	{ConfirmRefused, []string{"confirm-router"}, []string{"indexer", "channels", "agents"}, "an answer did not take effect: why, and which answer did"},
	{ConfirmDelegated, []string{"confirm-router"}, []string{"agents", "indexer"}, "a confirmation was handed to the run's agent (ai_assist)"},
	{PrefSet, []string{"confirm-router"}, []string{"learner", "indexer"}, "a choice was remembered (always for this skill step or error)"},
	{PrefForgotten, []string{"cli"}, []string{"learner", "indexer"}, "a remembered choice was revoked"},
	{EscalationRequested, []string{"escalator"}, []string{"escalator", "learner", "indexer"}, "an agent session asks to do a risky operation (never blocked: it goes on while the request is held)"},
	{EscalationRouted, []string{"escalator"}, []string{"escalator", "learner", "indexer", "agents"}, "the routing decision with its risk score, rule, reason, priority, first tier and safeguards"},
	{EscalationOffered, []string{"escalator"}, []string{"escalator", "indexer"}, "the request was offered to a tier as the confirmation <esc-id>-o<n>, until its deadline"},
	{EscalationEscalated, []string{"escalator"}, []string{"escalator", "indexer"}, "the request moved past a tier: timeout, unreachable (nobody present) or passed on by an approver"},
	{EscalationDecided, []string{"escalator"}, []string{"escalator", "learner", "indexer", "agents"}, "approved or denied: by a rule, the learned cache, a person or the final action; carries the safeguards"},
	{EscalationOutcome, []string{"escalator (heed.cmd.escalation.outcome)"}, []string{"learner", "indexer"}, "the agent reported how the decided operation went (success or failure)"},
	{ChangeSetProposed, []string{"changesets (heed.cmd.changeset.propose)", "runner (a run's deferred tool calls, when it ends)", "agent"}, []string{"changesets", "channels", "indexer"}, "an agent wake proposes changes for review: items of deferred tool calls, each with its summary (at most 10 a set)"},
	{ChangeSetDecided, []string{"changesets (heed.cmd.changeset.decide)", "agent"}, []string{"runner", "changesets", "channels", "indexer"}, "a person confirmed, rejected (with a reason) or deferred items; the first valid decision of an item in log order takes effect"},
	{ChangeSetRefused, []string{"changesets"}, []string{"channels", "indexer"}, "decisions written straight to the log that did not take effect: why, and which decision did"},
	{ChangeSetExpired, []string{"changesets (its expiry timer)"}, []string{"changesets", "channels", "indexer"}, "the set's time ran out: the items still pending count as no decision"},
	{ChangeApplyStarted, []string{"runner"}, []string{"runner", "changesets", "indexer"}, "the runner applies a confirmed item: calls its tool (after the tool's check) with the item's idempotency key"},
	{ChangeApplyCompleted, []string{"runner"}, []string{"runner", "changesets", "indexer"}, "a confirmed item was applied, with the tool's output"},
	{ChangeApplyFailed, []string{"runner"}, []string{"runner", "changesets", "indexer"}, "a confirmed item was not applied: stale (its target changed since the proposal) or the tool failed"},
}

// Catalog returns a copy of the catalog sorted by type.
func Catalog() []TypeInfo {
	out := append([]TypeInfo(nil), catalog...)
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

var knownTypes = func() map[Type]bool {
	m := make(map[Type]bool, len(catalog))
	for _, t := range catalog {
		m[t.Type] = true
	}
	return m
}()

// knownTypeNames maps each catalog type's name to itself: the decoder
// keeps the catalog's string instead of a copy per event.
var knownTypeNames = func() map[string]string {
	m := make(map[string]string, len(catalog))
	for _, t := range catalog {
		m[string(t.Type)] = string(t.Type)
	}
	return m
}()

// Known reports whether t is in the catalog.
func (t Type) Known() bool { return knownTypes[t] }
