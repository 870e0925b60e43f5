package client

import (
	"context"

	"github.com/heedhq/heed/events/command"
)

// call sends one command with the client's default timeout and decodes
// its reply.
func call[Reply any](ctx context.Context, c *Client, subject string, req any) (Reply, error) {
	var out Reply
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	if c.denied != nil {
		var stop func()
		ctx, stop = c.denied.watch(ctx, subject)
		defer stop()
	}
	err := command.Call(ctx, c.nc, subject, req, &out)
	if err != nil {
		if denied := deniedCause(ctx); denied != nil {
			return out, denied
		}
	}
	return out, err
}

// runCommand is a run command's subject: on the client's agent's own path
// when it has one (Agent).
func (c *Client) runCommand(subject string) string {
	if c.agent == "" {
		return subject
	}
	return command.AsAgent(c.agent, subject)
}

// GetRun reads a run's events after a sequence, waiting up to req.WaitMS
// for one (heed.cmd.run.get; on the agent's path with Agent).
func (c *Client) GetRun(ctx context.Context, req command.GetRun) (command.RunEvents, error) {
	return call[command.RunEvents](ctx, c, c.runCommand(command.RunGet), req)
}

// StartRun starts a run of a skill (heed.cmd.run.start). The skill is
// validated first; a bad skill or input is an error with code
// invalid_request and every problem in the message.
func (c *Client) StartRun(ctx context.Context, req command.StartRun) (command.RunReply, error) {
	return call[command.RunReply](ctx, c, c.runCommand(command.RunStart), req)
}

// Continue answers a paused run's confirmation as its agent (method
// agent), or lets a run awaiting its agent apply on_error
// (heed.cmd.run.continue).
func (c *Client) Continue(ctx context.Context, req command.ContinueRun) (command.RunReply, error) {
	return call[command.RunReply](ctx, c, c.runCommand(command.RunContinue), req)
}

// Retry starts the next attempt of a failed step with corrected args
// (heed.cmd.run.retry). If it succeeds, heed learns the correction.
func (c *Client) Retry(ctx context.Context, req command.RetryStep) (command.RunReply, error) {
	return call[command.RunReply](ctx, c, c.runCommand(command.RunRetry), req)
}

// Cancel cancels a run (heed.cmd.run.cancel).
func (c *Client) Cancel(ctx context.Context, req command.CancelRun) (command.RunReply, error) {
	return call[command.RunReply](ctx, c, c.runCommand(command.RunCancel), req)
}

// RequestConfirmation asks a question directly (heed.cmd.confirm.request);
// wait for the answer with WaitAnswer.
func (c *Client) RequestConfirmation(ctx context.Context, req command.RequestConfirmation) (command.ConfirmationReply, error) {
	return call[command.ConfirmationReply](ctx, c, command.ConfirmRequest, req)
}

// Answer answers a confirmation as a person (heed.cmd.confirm.answer):
// method user, with req.By and req.Channel. A late answer is an error with
// code conflict; errors.As to *command.ErrorReply gives the answer that
// took effect.
func (c *Client) Answer(ctx context.Context, req command.AnswerConfirmation) (command.AnswerReply, error) {
	return call[command.AnswerReply](ctx, c, command.ConfirmAnswer, req)
}

// LearnFix teaches the healer a fix by hand (heed.cmd.fix.learn). A tool
// or action tool the healer does not have, or a patch template that does
// not compile, is an error with code invalid_request.
func (c *Client) LearnFix(ctx context.Context, req command.LearnFix) (command.FixReply, error) {
	return call[command.FixReply](ctx, c, command.FixLearn, req)
}

// ForgetFix revokes a learned fix (heed.cmd.fix.forget); an unknown id is
// an error with code not_found.
func (c *Client) ForgetFix(ctx context.Context, req command.ForgetFix) (command.FixReply, error) {
	return call[command.FixReply](ctx, c, command.FixForget, req)
}

// RequestEscalation asks for permission to do an operation
// (heed.cmd.escalation.request). It returns at once: Status held means a
// tier decides (wait with WaitEscalation, or poll EscalationStatus);
// approved or denied means a rule or the learned cache decided already.
func (c *Client) RequestEscalation(ctx context.Context, req command.RequestEscalation) (command.EscalationReply, error) {
	return call[command.EscalationReply](ctx, c, command.EscalationRequest, req)
}

// EscalationStatus is an escalation's folded state
// (heed.cmd.escalation.status); an unknown id is an error with code
// not_found.
func (c *Client) EscalationStatus(ctx context.Context, id string) (command.EscalationState, error) {
	return call[command.EscalationState](ctx, c, command.EscalationStatus, command.EscalationStatusRequest{ID: id})
}

// Held says whether a session may start new risky work and lists its held
// requests (heed.cmd.escalation.held); an empty session lists every
// session with held requests in Sessions.
func (c *Client) Held(ctx context.Context, session string) (command.HeldReply, error) {
	return call[command.HeldReply](ctx, c, command.EscalationHeld, command.HeldRequest{Session: session})
}

// ReportOutcome tells heed how a decided operation went
// (heed.cmd.escalation.outcome), once per escalation.
func (c *Client) ReportOutcome(ctx context.Context, req command.ReportOutcome) (command.OutcomeReply, error) {
	return call[command.OutcomeReply](ctx, c, command.EscalationOutcome, req)
}

// ProposeChanges proposes one agent wake's calls of deferred tools for
// review (heed.cmd.changeset.propose): the reply names the set (sets, past
// events.MaxChangeItems items) and the id of every queued item. A call of
// an immediate or unknown tool is refused (invalid_request) and nothing is
// queued.
func (c *Client) ProposeChanges(ctx context.Context, req command.ProposeChangeSet) (command.ProposeReply, error) {
	return call[command.ProposeReply](ctx, c, command.ChangeSetPropose, req)
}

// DecideChanges confirms, rejects or defers items of a change set
// (heed.cmd.changeset.decide); each item's first decision wins, and the
// reply says which items another decision had taken already.
func (c *Client) DecideChanges(ctx context.Context, req command.DecideChangeSet) (command.DecideReply, error) {
	return call[command.DecideReply](ctx, c, command.ChangeSetDecide, req)
}

// ChangeSet is a set's folded state (heed.cmd.changeset.status); an unknown
// id is an error with code not_found.
func (c *Client) ChangeSet(ctx context.Context, id string) (command.ChangeSetState, error) {
	return call[command.ChangeSetState](ctx, c, command.ChangeSetStatus, command.ChangeSetStatusRequest{ID: id})
}

// ChangeSets lists change sets (heed.cmd.changeset.list): open ones unless
// req.All, newest first.
func (c *Client) ChangeSets(ctx context.Context, req command.ListChangeSets) (command.ListChangeSetsReply, error) {
	return call[command.ListChangeSetsReply](ctx, c, command.ChangeSetList, req)
}

// DecisionHistory is an agent's recent decisions for its next wake
// (heed.cmd.changeset.history): text for its prompt and the records.
func (c *Client) DecisionHistory(ctx context.Context, req command.DecisionHistoryRequest) (command.DecisionHistoryReply, error) {
	return call[command.DecisionHistoryReply](ctx, c, command.ChangeSetHistory, req)
}
