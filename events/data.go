package events

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Payloads of the event types, mirroring schemas/events/*.json (a test
// checks that instances of these validate). Optional fields use omitempty.

// ErrorInfo describes a failure.
type ErrorInfo struct {
	Message   string `json:"message"`
	Kind      string `json:"kind,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// SkillRef identifies the skill of a requested run and carries its source.
type SkillRef struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Digest string `json:"digest"`
	File   string `json:"file,omitempty"`
}

// RunRequestedData is heed.run.requested.
type RunRequestedData struct {
	Skill       SkillRef       `json:"skill"`
	Inputs      map[string]any `json:"inputs"`
	Yes         bool           `json:"yes,omitempty"`
	RequestedBy string         `json:"requested_by"`
	Agent       string         `json:"agent,omitempty"`
	RequestID   string         `json:"request_id,omitempty"`
}

// RunStartedData is heed.run.started.
type RunStartedData struct {
	Skill  string         `json:"skill"`
	Driver string         `json:"driver"` // runner | agent
	Inputs map[string]any `json:"inputs,omitempty"`
	Steps  []string       `json:"steps,omitempty"`
	Agent  string         `json:"agent,omitempty"`
	Yes    bool           `json:"yes,omitempty"`
}

// StepStartedData is heed.run.step.started.
type StepStartedData struct {
	Step           string         `json:"step"`
	Index          int            `json:"index"`
	Attempt        int            `json:"attempt"`
	Kind           string         `json:"kind"` // tool | compute | confirm
	Tool           string         `json:"tool,omitempty"`
	Args           map[string]any `json:"args,omitempty"`
	ArgsTruncated  bool           `json:"args_truncated,omitempty"`
	IdempotencyKey string         `json:"idempotency_key,omitempty"`
	RetryOf        string         `json:"retry_of,omitempty"`
}

// StepCompletedData is heed.run.step.completed.
type StepCompletedData struct {
	Step            string  `json:"step"`
	Index           int     `json:"index"`
	Attempt         int     `json:"attempt"`
	Output          any     `json:"output,omitempty"`
	OutputTruncated bool    `json:"output_truncated,omitempty"`
	DurationMS      float64 `json:"duration_ms,omitempty"`
}

// StepFailedData is heed.run.step.failed.
type StepFailedData struct {
	Step          string         `json:"step"`
	Index         int            `json:"index"`
	Attempt       int            `json:"attempt"`
	Tool          string         `json:"tool,omitempty"`
	Args          map[string]any `json:"args,omitempty"`
	ArgsTruncated bool           `json:"args_truncated,omitempty"`
	Error         ErrorInfo      `json:"error"`
	Output        any            `json:"output,omitempty"`
	DurationMS    float64        `json:"duration_ms,omitempty"`
}

// StepSkippedData is heed.run.step.skipped.
type StepSkippedData struct {
	Step   string `json:"step"`
	Index  int    `json:"index"`
	Reason string `json:"reason"`
}

// Pause reasons.
const (
	PauseAwaitingConfirmation = "awaiting_confirmation"
	PauseAwaitingAgent        = "awaiting_agent"
)

// RunPausedData is heed.run.paused.
type RunPausedData struct {
	Reason    string `json:"reason"`
	Step      string `json:"step"`
	Index     int    `json:"index"`
	ConfirmID string `json:"confirm_id,omitempty"`
	Message   string `json:"message,omitempty"`
}

// RunResumedData is heed.run.resumed.
type RunResumedData struct {
	Step      string `json:"step"`
	Index     int    `json:"index"`
	ConfirmID string `json:"confirm_id,omitempty"`
	Choice    string `json:"choice,omitempty"`
	Method    string `json:"method,omitempty"`
	By        string `json:"by,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// RunCompletedData is heed.run.completed.
type RunCompletedData struct {
	Summary          string         `json:"summary,omitempty"`
	Outputs          map[string]any `json:"outputs,omitempty"`
	OutputsTruncated bool           `json:"outputs_truncated,omitempty"`
	DurationMS       float64        `json:"duration_ms,omitempty"`
}

// RunFailedData is heed.run.failed.
type RunFailedData struct {
	Step       string    `json:"step,omitempty"`
	Index      *int      `json:"index,omitempty"`
	Error      ErrorInfo `json:"error"`
	DurationMS float64   `json:"duration_ms,omitempty"`
}

// RunCancelledData is heed.run.cancelled.
type RunCancelledData struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	Step   string `json:"step,omitempty"`
	Index  *int   `json:"index,omitempty"`
}

// Option is one answer a confirmation offers.
type Option struct {
	Label       string `json:"label"`
	Value       string `json:"value"`
	Description string `json:"description,omitempty"`
}

// ConfirmRequestedData is heed.confirm.requested.
type ConfirmRequestedData struct {
	Title           string         `json:"title,omitempty"`
	Message         string         `json:"message"`
	Options         []Option       `json:"options"`
	Default         string         `json:"default,omitempty"`
	TimeoutS        float64        `json:"timeout_s,omitempty"`
	AIAssist        bool           `json:"ai_assist,omitempty"`
	LearnPreference bool           `json:"learn_preference,omitempty"`
	Yes             bool           `json:"yes,omitempty"`
	Requester       string         `json:"requester"`
	Agent           string         `json:"agent,omitempty"`
	RunID           string         `json:"run_id,omitempty"`
	Skill           string         `json:"skill,omitempty"`
	Step            string         `json:"step,omitempty"`
	Index           *int           `json:"index,omitempty"`
	Context         map[string]any `json:"context,omitempty"`
}

// Answer methods: how a confirmation was decided.
const (
	MethodUser     = "user"
	MethodOverride = "override"
	MethodMemory   = "memory"
	MethodAgent    = "agent"
	MethodTimeout  = "timeout"
	MethodError    = "error"
)

// ConfirmAnsweredData is heed.confirm.answered.
type ConfirmAnsweredData struct {
	Choice      string  `json:"choice"`
	Method      string  `json:"method"`
	By          string  `json:"by"`
	Channel     string  `json:"channel,omitempty"`
	Reason      string  `json:"reason,omitempty"`
	Remember    string  `json:"remember,omitempty"`
	LearnedFrom string  `json:"learned_from,omitempty"`
	RunID       string  `json:"run_id,omitempty"`
	DurationMS  float64 `json:"duration_ms,omitempty"`
}

// ConfirmExpiredData is heed.confirm.expired.
type ConfirmExpiredData struct {
	Deadline time.Time `json:"deadline"`
	Default  string    `json:"default,omitempty"`
	RunID    string    `json:"run_id,omitempty"`
}

// ConfirmDelegatedData is heed.confirm.delegated.
type ConfirmDelegatedData struct {
	Agent    string         `json:"agent"`
	RunID    string         `json:"run_id,omitempty"`
	Skill    string         `json:"skill,omitempty"`
	Step     string         `json:"step,omitempty"`
	Message  string         `json:"message"`
	Options  []Option       `json:"options"`
	Default  string         `json:"default,omitempty"`
	Deadline time.Time      `json:"deadline"`
	Context  map[string]any `json:"context,omitempty"`
	Question string         `json:"question,omitempty"`
}

// Preference scopes.
const (
	ScopeSkillStep = "skill_step"
	ScopeError     = "error"
)

// PrefSetData is heed.pref.set.
type PrefSetData struct {
	Scope        string `json:"scope"`
	Skill        string `json:"skill,omitempty"`
	Step         string `json:"step,omitempty"`
	Tool         string `json:"tool,omitempty"`
	ErrorPattern string `json:"error_pattern,omitempty"`
	Choice       string `json:"choice"`
	By           string `json:"by"`
	LearnedFrom  string `json:"learned_from,omitempty"`
	ConfirmID    string `json:"confirm_id,omitempty"`
}

// PrefForgottenData is heed.pref.forgotten.
type PrefForgottenData struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// PrefID is the aggregate id of the preference for scope and its key parts
// (skill and step for skill_step; tool and error pattern for error).
func PrefID(scope string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return "pref-" + hex.EncodeToString(h.Sum(nil)[:10])
}
