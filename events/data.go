package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
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
	// KnownIssues are learned fixes for the skill's tools: what to watch for.
	KnownIssues []KnownIssue `json:"known_issues,omitempty"`
}

// KnownIssue is a learned failure of a tool, shown when a run starts.
type KnownIssue struct {
	Tool        string  `json:"tool"`
	Pattern     string  `json:"pattern"`
	Description string  `json:"description,omitempty"`
	FixID       string  `json:"fix_id,omitempty"`
	Confidence  float64 `json:"confidence,omitempty"`
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

// RunAbandonedData is heed.run.abandoned: the runner's sweep ends a run
// (any driver) that had no event for its idle time.
type RunAbandonedData struct {
	Reason string `json:"reason"`
	// LastEventID and LastEventAt are the run's last event before it was
	// abandoned; IdleMS is how long the run had been quiet.
	LastEventID string    `json:"last_event_id,omitempty"`
	LastEventAt time.Time `json:"last_event_at,omitzero"`
	IdleMS      float64   `json:"idle_ms"`
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
	// Approvers, when set, are the only ones whose answers count.
	Approvers []string `json:"approvers,omitempty"`
	// Quorum, when set, makes each answer a vote.
	Quorum *Quorum `json:"quorum,omitempty"`
}

// Quorum asks for Required distinct voters choosing the same option
// before it takes effect; an option in Veto takes effect on its first vote.
type Quorum struct {
	Required int      `json:"required"`
	Veto     []string `json:"veto,omitempty"`
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

// AnswerRef names an answer: the one that took effect, in a refusal.
type AnswerRef struct {
	EventID string    `json:"event_id"`
	Choice  string    `json:"choice"`
	Method  string    `json:"method"`
	By      string    `json:"by"`
	Channel string    `json:"channel,omitempty"`
	At      time.Time `json:"at"`
}

// ConfirmRefusedData is heed.confirm.refused: an answer that did not take
// effect, why (code and reason), and the answer that did.
type ConfirmRefusedData struct {
	AnswerID  string     `json:"answer_id"`
	AnswerSeq uint64     `json:"answer_seq"`
	Choice    string     `json:"choice"`
	Method    string     `json:"method"`
	By        string     `json:"by"`
	Channel   string     `json:"channel,omitempty"`
	Code      string     `json:"code"`
	Reason    string     `json:"reason"`
	Winner    *AnswerRef `json:"winner,omitempty"`
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

// RunWarningData is heed.run.warning.
type RunWarningData struct {
	Step       string  `json:"step"`
	Index      int     `json:"index"`
	Tool       string  `json:"tool"`
	PatternID  string  `json:"pattern_id"`
	Message    string  `json:"message"`
	Confidence float64 `json:"confidence,omitempty"`
}

// Heal plans.
const (
	PlanLearnedFix = "learned_fix"
	PlanPatternFix = "pattern_fix"
	PlanAgent      = "agent"
	PlanGiveUp     = "give_up"
)

// Classification is the healer's reading of a failure.
type Classification struct {
	Kind      string `json:"kind"`      // network, auth, quota, not_found, timeout, unknown
	Signature string `json:"signature"` // the normalized error
	Pattern   string `json:"pattern,omitempty"`
}

// FixRef names the fix a heal uses.
type FixRef struct {
	FixID       string         `json:"fix_id,omitempty"`
	Source      string         `json:"source,omitempty"` // learned | pattern
	Tool        string         `json:"tool,omitempty"`
	Args        map[string]any `json:"args,omitempty"`
	ArgsPatch   map[string]any `json:"args_patch,omitempty"`
	Description string         `json:"description,omitempty"`
}

// HealTriggeredData is heed.run.heal.triggered.
type HealTriggeredData struct {
	Step           string         `json:"step"`
	Index          int            `json:"index"`
	Attempt        int            `json:"attempt"`
	Tool           string         `json:"tool,omitempty"`
	Error          ErrorInfo      `json:"error"`
	Classification Classification `json:"classification"`
	Plan           string         `json:"plan"`
	Fix            *FixRef        `json:"fix,omitempty"`
	HealAttempt    int            `json:"heal_attempt,omitempty"`
}

// HealFixAppliedData is heed.run.heal.fix_applied.
type HealFixAppliedData struct {
	Step       string     `json:"step"`
	Index      int        `json:"index"`
	Attempt    int        `json:"attempt"`
	Fix        FixRef     `json:"fix"`
	OK         bool       `json:"ok"`
	Output     any        `json:"output,omitempty"`
	Error      *ErrorInfo `json:"error,omitempty"`
	DurationMS float64    `json:"duration_ms,omitempty"`
}

// HealRetriedData is heed.run.heal.retried.
type HealRetriedData struct {
	Step        string         `json:"step"`
	Index       int            `json:"index"`
	Attempt     int            `json:"attempt"`
	NextAttempt int            `json:"next_attempt"`
	Args        map[string]any `json:"args"`
	FixID       string         `json:"fix_id,omitempty"`
	Reason      string         `json:"reason,omitempty"`
}

// HealHealedData is heed.run.heal.healed.
type HealHealedData struct {
	Step      string `json:"step"`
	Index     int    `json:"index"`
	Attempt   int    `json:"attempt"`
	Via       string `json:"via"` // learned_fix | pattern_fix | agent
	FixID     string `json:"fix_id,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// HealGaveUpData is heed.run.heal.gave_up.
type HealGaveUpData struct {
	Step    string `json:"step"`
	Index   int    `json:"index"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
	FixID   string `json:"fix_id,omitempty"`
}

// HealEscalatedData is heed.run.heal.escalated.
type HealEscalatedData struct {
	Step     string         `json:"step"`
	Index    int            `json:"index"`
	Attempt  int            `json:"attempt"`
	Agent    string         `json:"agent"`
	Context  map[string]any `json:"context"`
	Question string         `json:"question,omitempty"`
}

// FixAction is a tool a fix runs before the retry.
type FixAction struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args,omitempty"`
}

// Fix sources.
const (
	FixFromAgent  = "agent"
	FixFromPerson = "person"
)

// FixLearnedData is heed.fix.learned.
type FixLearnedData struct {
	Tool         string         `json:"tool"`
	ErrorPattern string         `json:"error_pattern"`
	Match        string         `json:"match,omitempty"`
	RootCause    string         `json:"root_cause,omitempty"`
	Description  string         `json:"description"`
	Action       *FixAction     `json:"action,omitempty"`
	ArgsPatch    map[string]any `json:"args_patch,omitempty"`
	WhenWas      map[string]any `json:"when_was,omitempty"`
	Confidence   float64        `json:"confidence,omitempty"`
	Source       string         `json:"source"`
	By           string         `json:"by,omitempty"`
	LearnedFrom  string         `json:"learned_from,omitempty"`
	RunID        string         `json:"run_id,omitempty"`
}

// FixForgottenData is heed.fix.forgotten.
type FixForgottenData struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
}

// FixID is the aggregate id of the fix for a tool and error signature: a
// fix a person teaches (later lessons replace earlier).
func FixID(tool, signature string) string {
	h := sha256.Sum256([]byte(tool + "\x00" + signature))
	return "fix-" + hex.EncodeToString(h[:10])
}

// LearnedFixID is the aggregate id of a fix learned from a correction: one
// per tool, error signature and failed values (when_was), since a value
// corrected in one run is right for the same failed value, not for every
// value with the same error.
func LearnedFixID(tool, signature string, failed map[string]any) string {
	return FixID(tool, signature+"\x00"+canonicalJSON(failed))
}

// canonicalJSON is a stable JSON form: encoding/json sorts map keys, and a
// round trip makes numbers and nested values uniform.
func canonicalJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var doc any
	if json.Unmarshal(b, &doc) != nil {
		return string(b)
	}
	b, _ = json.Marshal(doc)
	return string(b)
}

// dataTypes are the Go types of every event's data.
var dataTypes = map[Type]reflect.Type{
	RunRequested: reflect.TypeFor[RunRequestedData](), RunStarted: reflect.TypeFor[RunStartedData](), RunStepStarted: reflect.TypeFor[StepStartedData](),
	RunStepCompleted: reflect.TypeFor[StepCompletedData](), RunStepFailed: reflect.TypeFor[StepFailedData](), RunStepSkipped: reflect.TypeFor[StepSkippedData](),
	RunPaused: reflect.TypeFor[RunPausedData](), RunResumed: reflect.TypeFor[RunResumedData](), RunCompleted: reflect.TypeFor[RunCompletedData](),
	RunFailed: reflect.TypeFor[RunFailedData](), RunCancelled: reflect.TypeFor[RunCancelledData](), RunAbandoned: reflect.TypeFor[RunAbandonedData](), RunWarning: reflect.TypeFor[RunWarningData](),
	HealTriggered: reflect.TypeFor[HealTriggeredData](), HealFixApplied: reflect.TypeFor[HealFixAppliedData](), HealRetried: reflect.TypeFor[HealRetriedData](),
	HealHealed: reflect.TypeFor[HealHealedData](), HealGaveUp: reflect.TypeFor[HealGaveUpData](), HealEscalated: reflect.TypeFor[HealEscalatedData](),
	FixLearned: reflect.TypeFor[FixLearnedData](), FixForgotten: reflect.TypeFor[FixForgottenData](),
	ConfirmRequested: reflect.TypeFor[ConfirmRequestedData](), ConfirmAnswered: reflect.TypeFor[ConfirmAnsweredData](), ConfirmExpired: reflect.TypeFor[ConfirmExpiredData](),
	ConfirmDelegated: reflect.TypeFor[ConfirmDelegatedData](), ConfirmRefused: reflect.TypeFor[ConfirmRefusedData](),
	PrefSet: reflect.TypeFor[PrefSetData](), PrefForgotten: reflect.TypeFor[PrefForgottenData](),
	EscalationRequested: reflect.TypeFor[EscalationRequestedData](), EscalationRouted: reflect.TypeFor[EscalationRoutedData](),
	EscalationOffered: reflect.TypeFor[EscalationOfferedData](), EscalationEscalated: reflect.TypeFor[EscalationEscalatedData](),
	EscalationDecided: reflect.TypeFor[EscalationDecidedData](), EscalationOutcome: reflect.TypeFor[EscalationOutcomeData](),
	ChangeSetProposed: reflect.TypeFor[ChangeSetProposedData](), ChangeSetDecided: reflect.TypeFor[ChangeSetDecidedData](),
	ChangeSetRefused: reflect.TypeFor[ChangeSetRefusedData](), ChangeSetExpired: reflect.TypeFor[ChangeSetExpiredData](),
	ChangeApplyStarted: reflect.TypeFor[ChangeApplyStartedData](), ChangeApplyCompleted: reflect.TypeFor[ChangeApplyCompletedData](),
	ChangeApplyFailed: reflect.TypeFor[ChangeApplyFailedData](),
}

// DataType is the Go type of an event type's data (a test checks each
// against its schema).
func DataType(t Type) (reflect.Type, bool) {
	d, ok := dataTypes[t]
	return d, ok
}
