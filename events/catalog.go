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
)

// Confirmation events: one aggregate per confirmation, subject
// heed.confirm.<confirm-id>.<verb>.
const (
	ConfirmRequested Type = "heed.confirm.requested"
	ConfirmAnswered  Type = "heed.confirm.answered"
	ConfirmExpired   Type = "heed.confirm.expired"
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
	{RunResumed, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a paused run continues"},
	{RunCompleted, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a run finished successfully"},
	{RunFailed, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a run stopped on an error"},
	{RunCancelled, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a run was cancelled"},
	{ConfirmRequested, []string{"runner", "agent"}, []string{"runner", "indexer"}, "a question with options awaits an answer"},
	{ConfirmAnswered, []string{"cli", "agent"}, []string{"runner", "indexer"}, "the one answer to a confirmation"},
	{ConfirmExpired, []string{"nats-server schedule"}, []string{"indexer"}, "a confirmation reached its deadline"},
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

// Known reports whether t is in the catalog.
func (t Type) Known() bool { return knownTypes[t] }
