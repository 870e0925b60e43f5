// Package command is the request/reply half of heed's contract: the
// subjects of the commands heed's services answer, their request and reply
// types (each request has a JSON Schema in schemas/commands/), and the
// error reply every command sends. Any NATS client can call a command with
// a plain request (`nats req heed.cmd.confirm.answer '{...}'`); Go code
// uses the client package.
//
// A command that fails replies with the NATS micro error headers
// (Nats-Service-Error-Code: one of heed's stable codes such as
// invalid_request, not_found, conflict, unavailable; Nats-Service-Error: the
// message on one line) and an ErrorReply as JSON body.
package command

import (
	"encoding/json"
	"time"

	"github.com/heedhq/heed/events"
)

// Command subjects. Commands are never captured by a stream.
const (
	RunStart       = events.CommandPrefix + ".run.start"
	RunContinue    = events.CommandPrefix + ".run.continue"
	RunRetry       = events.CommandPrefix + ".run.retry"
	RunCancel      = events.CommandPrefix + ".run.cancel"
	RunGet         = events.CommandPrefix + ".run.get"
	ConfirmRequest = events.CommandPrefix + ".confirm.request"
	ConfirmAnswer  = events.CommandPrefix + ".confirm.answer"
	FixLearn       = events.CommandPrefix + ".fix.learn"
	FixForget      = events.CommandPrefix + ".fix.forget"
	// Escalations, served by the escalator (docs/ESCALATIONS.md).
	EscalationRequest = events.CommandPrefix + ".escalation.request"
	EscalationStatus  = events.CommandPrefix + ".escalation.status"
	EscalationHeld    = events.CommandPrefix + ".escalation.held"
	EscalationOutcome = events.CommandPrefix + ".escalation.outcome"
	allCommandsHelp   = "heed.cmd.run.{start,continue,retry,cancel,get} (also as heed.cmd.as.<agent>.run.*), heed.cmd.confirm.{request,answer}, heed.cmd.fix.{learn,forget}, heed.cmd.escalation.{request,status,held,outcome}, heed.cmd.changeset.{propose,decide,status,list,history}"
)

// Subjects lists every command subject.
func Subjects() []string {
	return []string{RunStart, RunContinue, RunRetry, RunCancel, RunGet, ConfirmRequest, ConfirmAnswer, FixLearn, FixForget,
		EscalationRequest, EscalationStatus, EscalationHeld, EscalationOutcome,
		ChangeSetPropose, ChangeSetDecide, ChangeSetStatus, ChangeSetList, ChangeSetHistory}
}

// SkillSource is a skill's YAML and where it came from.
type SkillSource struct {
	Source string `json:"source"`
	File   string `json:"file,omitempty"`
}

// StartRun asks for a run of a skill (heed.cmd.run.start).
type StartRun struct {
	Skill       SkillSource    `json:"skill"`
	Inputs      map[string]any `json:"inputs,omitempty"`
	Yes         bool           `json:"yes,omitempty"`
	Agent       string         `json:"agent,omitempty"`
	RequestedBy string         `json:"requested_by,omitempty"`
	// RequestID makes a retried start request start one run, not two.
	RequestID string `json:"request_id,omitempty"`
}

// ContinueRun answers a paused run's confirmation as its agent, or lets a
// run awaiting its agent apply the failed step's on_error
// (heed.cmd.run.continue).
type ContinueRun struct {
	RunID  string `json:"run_id"`
	Choice string `json:"choice,omitempty"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// RetryStep starts the next attempt of a failed step with corrected args,
// merged over the failed attempt's (heed.cmd.run.retry).
type RetryStep struct {
	RunID  string         `json:"run_id"`
	Step   string         `json:"step,omitempty"` // default: the failed step
	Args   map[string]any `json:"args,omitempty"`
	Reason string         `json:"reason,omitempty"`
	By     string         `json:"by,omitempty"`
	// Attempt, when given, is the failed attempt this retry corrects: a
	// retry of an attempt that is no longer the step's last failure (a
	// retry sent twice, or two callers at once) is a conflict instead of
	// a retry of whatever failed since.
	Attempt int `json:"attempt,omitempty"`
}

// CancelRun cancels a run (heed.cmd.run.cancel).
type CancelRun struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// GetRun reads a run's events (heed.cmd.run.get): those after log
// sequence After (0: from its request on), waiting up to WaitMS (at most
// MaxRunWait) for one to come when there is none yet, so that a caller
// can follow a run with one request at a time and no access to the log.
type GetRun struct {
	RunID  string `json:"run_id"`
	After  uint64 `json:"after,omitempty"`
	WaitMS int    `json:"wait_ms,omitempty"`
}

// MaxRunWait bounds GetRun's wait.
const MaxRunWait = 10 * time.Second

// RunEvents is the reply of heed.cmd.run.get: the run's status and agent,
// and its events after the request's sequence in log order, each a
// CloudEvent in JSON format with its sequence. LastSeq is where the next
// request goes on from (After). A reply holds at most MaxRunEventsBytes
// of events: More says the run has more after LastSeq, to ask for at
// once.
type RunEvents struct {
	RunID   string      `json:"run_id"`
	Status  string      `json:"status"`
	Agent   string      `json:"agent,omitempty"`
	LastSeq uint64      `json:"last_seq"`
	Events  []StoredRaw `json:"events"`
	More    bool        `json:"more,omitempty"`
}

// MaxRunEventsBytes bounds the events of one RunEvents reply, under NATS'
// default 1 MiB message (one event larger than it still comes alone).
const MaxRunEventsBytes = 768 << 10

// StoredRaw is one stored event: its log sequence and the CloudEvent.
type StoredRaw struct {
	Seq   uint64          `json:"seq"`
	Event json.RawMessage `json:"event"`
}

// RunReply is the reply of every run command.
type RunReply struct {
	RunID     string `json:"run_id"`
	ConfirmID string `json:"confirm_id,omitempty"`
	Status    string `json:"status,omitempty"`
}

// RequestConfirmation asks a question directly (heed.cmd.confirm.request).
// ID is optional: an agent that chooses its own id can subscribe to
// heed.confirm.<id>.answered first and never miss the answer.
type RequestConfirmation struct {
	ID string `json:"id,omitempty"`
	events.ConfirmRequestedData
}

// ConfirmationReply says where the answer will appear.
type ConfirmationReply struct {
	ID            string    `json:"id"`
	Deadline      time.Time `json:"deadline"`
	AnswerSubject string    `json:"answer_subject"`
}

// AnswerConfirmation is a person's answer (heed.cmd.confirm.answer): By
// is who answered, Channel where (cli, terminal, web, desktop, slack...).
type AnswerConfirmation struct {
	ID       string `json:"id"`
	Choice   string `json:"choice"`
	Reason   string `json:"reason,omitempty"`
	By       string `json:"by"`
	Channel  string `json:"channel,omitempty"`
	Remember string `json:"remember,omitempty"`
	// RequestID makes a retried answer take effect once: sent again with
	// the same request id (and by), the reply is what the first wrote.
	RequestID string `json:"request_id,omitempty"`
}

// AnswerReply is the answer that was written.
type AnswerReply struct {
	ID      string    `json:"id"` // the confirmation
	EventID string    `json:"event_id"`
	Seq     uint64    `json:"seq"`
	Choice  string    `json:"choice"`
	Method  string    `json:"method"`
	By      string    `json:"by"`
	Channel string    `json:"channel,omitempty"`
	RunID   string    `json:"run_id,omitempty"`
	At      time.Time `json:"at"`
	// Counted: the answer was counted as a vote but the quorum is not
	// reached yet (nothing took effect).
	Counted bool `json:"counted,omitempty"`
	// Votes counted so far for the confirmation (with a quorum).
	Votes []Vote `json:"votes,omitempty"`
	// Needed is how many more votes Choice still needs.
	Needed int `json:"needed,omitempty"`
}

// Vote is one counted vote towards a quorum.
type Vote struct {
	Choice  string    `json:"choice"`
	By      string    `json:"by"`
	Channel string    `json:"channel,omitempty"`
	At      time.Time `json:"at"`
}

// LearnFix teaches the healer a fix by hand (heed.cmd.fix.learn): when Tool
// fails with an error containing Match (case-insensitive), run Action (if
// any) and retry the step with ArgsPatch over its args. The healer refuses
// (invalid_request) a tool or action tool it does not have and a patch
// template that does not compile, so a fix it could never apply is never
// recorded.
type LearnFix struct {
	Tool        string            `json:"tool"`
	Match       string            `json:"match"`
	Description string            `json:"description"`
	RootCause   string            `json:"root_cause,omitempty"`
	ArgsPatch   map[string]any    `json:"args_patch,omitempty"`
	Action      *events.FixAction `json:"action,omitempty"`
	By          string            `json:"by,omitempty"`
}

// ForgetFix revokes a learned fix (heed.cmd.fix.forget); an id heed has no
// fix for is refused with not_found.
type ForgetFix struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// FixReply is the reply of both fix commands: the fix and the event
// written.
type FixReply struct {
	ID      string `json:"id"`
	EventID string `json:"event_id"`
}

// ErrorReply is the JSON body of a failed command's reply. Answer names
// the answer that took effect when an answer came too late.
type ErrorReply struct {
	Code    events.Code       `json:"code"`
	Message string            `json:"message"`
	Answer  *events.AnswerRef `json:"answer,omitempty"`
}

func (e *ErrorReply) Error() string { return string(e.Code) + ": " + e.Message }

// Answered is implemented by errors that know the answer that took effect
// (a late answer's conflict); the error reply carries it.
type Answered interface {
	error
	AnswerRef() events.AnswerRef
}
