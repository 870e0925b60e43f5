package heedmcp

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/skill"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxWait bounds how long a tool call waits for a run or an answer.
const maxWait = 10 * time.Minute

func waitOf(s float64) time.Duration {
	return min(time.Duration(s*float64(time.Second)), maxWait)
}

// ---- inputs and outputs ----

type SkillListIn struct{}

type SkillInfo struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	File        string      `json:"file"`
	Inputs      []InputInfo `json:"inputs,omitempty"`
	Steps       []string    `json:"steps"`
}

type InputInfo struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Default     any    `json:"default,omitempty"`
}

type SkillListOut struct {
	Skills []SkillInfo `json:"skills"`
}

type SkillRunIn struct {
	Skill  string         `json:"skill" jsonschema:"the skill's name (skill_list) or its file in the skills directory"`
	Inputs map[string]any `json:"inputs,omitempty" jsonschema:"the skill's inputs"`
	WaitS  float64        `json:"wait_s,omitempty" jsonschema:"seconds to wait for the run to pause or end (0: return at once with the run id; at most 600)"`
}

type RunIn struct {
	RunID string  `json:"run_id"`
	WaitS float64 `json:"wait_s,omitempty" jsonschema:"seconds to wait for the run to pause or end (at most 600)"`
}

type ContinueIn struct {
	RunID  string  `json:"run_id"`
	Choice string  `json:"choice,omitempty" jsonschema:"one of the question's options (empty for a failed step handed to you: on_error applies)"`
	Reason string  `json:"reason,omitempty"`
	WaitS  float64 `json:"wait_s,omitempty" jsonschema:"seconds to wait for the run to pause or end after it (at most 600)"`
}

type RetryIn struct {
	RunID  string         `json:"run_id"`
	Step   string         `json:"step,omitempty" jsonschema:"the step to retry (default: the failed one)"`
	Args   map[string]any `json:"args" jsonschema:"corrected args, merged over the failed attempt's"`
	Reason string         `json:"reason,omitempty" jsonschema:"why this fixes it: heed learns the correction as a fix when the retry succeeds"`
	WaitS  float64        `json:"wait_s,omitempty"`
}

type CancelIn struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason,omitempty"`
}

type ConfirmRequestIn struct {
	Title     string          `json:"title,omitempty"`
	Message   string          `json:"message" jsonschema:"the question a person reads"`
	Options   []events.Option `json:"options,omitempty" jsonschema:"the answers (default: Proceed/proceed and Cancel/cancel)"`
	Default   string          `json:"default,omitempty" jsonschema:"the option that applies at the deadline (default: cancel, else the last option)"`
	TimeoutS  float64         `json:"timeout_s,omitempty" jsonschema:"seconds until the default applies (default 300)"`
	Approvers []string        `json:"approvers,omitempty" jsonschema:"who may answer (default: anyone)"`
	WaitS     float64         `json:"wait_s,omitempty" jsonschema:"seconds to wait for the answer (0: return at once; at most 600)"`
}

type ConfirmRequestOut struct {
	ID       string    `json:"id"`
	Deadline time.Time `json:"deadline"`
	Answered bool      `json:"answered"`
	Choice   string    `json:"choice,omitempty"`
	By       string    `json:"by,omitempty"`
	Method   string    `json:"method,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Next     string    `json:"next"`
}

type ConfirmAnswerIn struct {
	ID     string `json:"id" jsonschema:"the confirmation's id"`
	Choice string `json:"choice"`
	Reason string `json:"reason,omitempty"`
}

type EscalationIn struct {
	ID          string   `json:"id,omitempty" jsonschema:"your own id for this request: asking again with the same id and content returns the same escalation (a retry after a timeout), never a second one; other content under the id is a conflict"`
	Operation   string   `json:"operation" jsonschema:"what you want to do: deploy, force_push, file_edit, migration..."`
	Scope       string   `json:"scope,omitempty" jsonschema:"what it applies to: a path, a branch, a service"`
	Environment string   `json:"environment,omitempty"`
	Risk        *float64 `json:"risk,omitempty" jsonschema:"your risk estimate, 0 to 1 (heed's rules score it otherwise)"`
	Confidence  *float64 `json:"confidence,omitempty" jsonschema:"how sure you are, 0 to 1"`
	Title       string   `json:"title,omitempty"`
	Message     string   `json:"message,omitempty"`
}

type EscalationStatusIn struct {
	ID    string  `json:"id" jsonschema:"the escalation's id (escalation_request's reply)"`
	WaitS float64 `json:"wait_s,omitempty" jsonschema:"seconds to wait while it is held for people to decide (0: at once; at most 600)"`
}

type EscalationOutcomeIn struct {
	ID      string `json:"id" jsonschema:"the approved escalation's id"`
	Outcome string `json:"outcome" jsonschema:"success or failure: how the operation went once you did it (it feeds the learned cache; a failure suspends it at once)"`
	Detail  string `json:"detail,omitempty"`
}

type SessionIn struct{}

type ProposeIn struct {
	Subject string                 `json:"subject" jsonschema:"what you work on: a task, a ticket, a repository"`
	Wake    string                 `json:"wake,omitempty"`
	Title   string                 `json:"title,omitempty"`
	Calls   []command.ProposedCall `json:"calls" jsonschema:"your calls of deferred tools, with a summary each"`
}

type HistoryIn struct {
	Subject      string `json:"subject,omitempty"`
	Limit        int    `json:"limit,omitempty"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

type KnownIssuesIn struct {
	Tool string `json:"tool"`
}

type KnownIssuesOut struct {
	Tool     string              `json:"tool"`
	Issues   []events.KnownIssue `json:"issues"`
	Patterns []PatternInfo       `json:"patterns"`
	Advice   string              `json:"advice"`
}

type PatternInfo struct {
	Signature   string  `json:"signature"`
	Hint        string  `json:"hint,omitempty"`
	Occurrences int     `json:"occurrences"`
	Confidence  float64 `json:"confidence"`
}

type LearnFixIn struct {
	Tool        string         `json:"tool"`
	Match       string         `json:"match" jsonschema:"text of the error this fixes (case-insensitive)"`
	Description string         `json:"description"`
	RootCause   string         `json:"root_cause,omitempty"`
	ArgsPatch   map[string]any `json:"args_patch,omitempty" jsonschema:"args to set on the retry (templates allowed)"`
}

type StatsIn struct{}

type StatsOut struct {
	AutoHealRate   float64                   `json:"auto_heal_rate"`
	TotalFailures  int                       `json:"total_failures"`
	AutoFixed      int                       `json:"auto_fixed"`
	AgentFixed     int                       `json:"agent_fixed"`
	ManualRequired int                       `json:"manual_required"`
	FixesLearned   int                       `json:"fixes_learned"`
	Escalations    readmodel.EscalationStats `json:"escalations"`
	ChangeSets     []readmodel.ChangeStats   `json:"change_sets"`
}

func (s *Server) addTools() {
	srv := s.srv
	mcp.AddTool(srv, &mcp.Tool{Name: "skill_list", Description: "List the skills heed can run: name, description, inputs and steps."}, s.skillList)
	mcp.AddTool(srv, &mcp.Tool{Name: "skill_run", Description: "Run a skill. Returns at once with the run id, or waits up to wait_s for the run to pause or end. A paused run is a result: it says what it waits for and what to call next."}, s.skillRun)
	mcp.AddTool(srv, &mcp.Tool{Name: "skill_status", Description: "Where a run stands: its status, what it waits for, why a step failed (with the tool's known issues and the healer's context), what to call next. wait_s waits for it to pause or end."}, s.skillStatus)
	mcp.AddTool(srv, &mcp.Tool{Name: "skill_continue", Description: "Answer the question a paused run waits at with one of its options (or, for a failed step handed to you, let on_error apply)."}, s.skillContinue)
	mcp.AddTool(srv, &mcp.Tool{Name: "skill_retry_step", Description: "Retry a failed step with corrected args, merged over the failed ones. When the retry succeeds, heed learns the correction as a fix for that error."}, s.skillRetry)
	mcp.AddTool(srv, &mcp.Tool{Name: "skill_cancel", Description: "Cancel a run."}, s.skillCancel)
	mcp.AddTool(srv, &mcp.Tool{Name: "confirmation_request", Description: "Ask a person a question with options, a deadline and a default; wait_s waits for the answer."}, s.confirmRequest)
	mcp.AddTool(srv, &mcp.Tool{Name: "confirmation_answer", Description: "Answer a confirmation yourself, where heed lets this agent answer it (the request's approvers)."}, s.confirmAnswer)
	mcp.AddTool(srv, &mcp.Tool{Name: "escalation_request", Description: "Ask for permission for a risky operation. Never blocks: the reply says approved (with the safeguards you must apply), denied, or held (a tier of people decides: follow it with escalation_status; give an id to make a retry safe)."}, s.escalationRequest)
	mcp.AddTool(srv, &mcp.Tool{Name: "escalation_status", Description: "Where an escalation stands: held (and at which tier), approved with its safeguards, or denied with why; wait_s waits while it is held."}, s.escalationStatus)
	mcp.AddTool(srv, &mcp.Tool{Name: "escalation_outcome", Description: "Report how an approved operation went (success or failure), once: heed learns from it which operations it may approve by itself next time."}, s.escalationOutcome)
	mcp.AddTool(srv, &mcp.Tool{Name: "session_can_continue", Description: "May this session start new risky work? No while more than 3 requests, or any critical one, are held."}, s.sessionCanContinue)
	mcp.AddTool(srv, &mcp.Tool{Name: "change_set_propose", Description: "Propose this wake's calls of deferred tools for a person's review (one item each; a batch tool one item per element). They are not applied until confirmed."}, s.changeSetPropose)
	mcp.AddTool(srv, &mcp.Tool{Name: "decision_history", Description: "How people decided your recent proposals (confirmed, rejected with reasons, deferred, expired): read it at the start of a wake."}, s.decisionHistory)
	mcp.AddTool(srv, &mcp.Tool{Name: "check_known_issues", Description: "Known failures of a tool and their fixes, and recurring failure patterns, before you call it."}, s.checkKnownIssues)
	mcp.AddTool(srv, &mcp.Tool{Name: "learn_tool_fix", Description: "Teach heed a fix for a tool failure: when the tool fails with an error containing match, retry with args_patch."}, s.learnToolFix)
	mcp.AddTool(srv, &mcp.Tool{Name: "stats", Description: "heed's statistics: auto-heal rate, failures, escalations avoided, change-set decisions."}, s.stats)
}

func (s *Server) skillList(ctx context.Context, _ *mcp.CallToolRequest, _ SkillListIn) (*mcp.CallToolResult, SkillListOut, error) {
	known, err := s.skills()
	if err != nil {
		return nil, SkillListOut{}, toolError(err)
	}
	out := SkillListOut{Skills: []SkillInfo{}}
	for _, file := range known {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		sk, err := skill.Load(file, b)
		if err != nil {
			continue
		}
		info := SkillInfo{Name: sk.Name, Description: sk.Description, File: file}
		for _, in := range sk.Inputs {
			info.Inputs = append(info.Inputs, InputInfo{Name: in.Name, Type: in.Type, Description: in.Description, Required: in.Required, Default: in.Default})
		}
		for _, st := range sk.Steps {
			info.Steps = append(info.Steps, st.Name)
		}
		out.Skills = append(out.Skills, info)
	}
	slices.SortFunc(out.Skills, func(a, b SkillInfo) int { return strings.Compare(a.Name, b.Name) })
	return nil, out, nil
}

func (s *Server) skillRun(ctx context.Context, req *mcp.CallToolRequest, in SkillRunIn) (*mcp.CallToolResult, RunResult, error) {
	src, file, err := s.skillSource(in.Skill)
	if err != nil {
		return nil, RunResult{}, toolError(err)
	}
	rep, err := s.c.StartRun(ctx, command.StartRun{Skill: command.SkillSource{Source: src, File: file}, Inputs: in.Inputs, Agent: s.cfg.Identity, RequestedBy: s.cfg.Identity})
	if err != nil {
		return nil, RunResult{}, toolError(err)
	}
	return s.runResult(ctx, req, rep.RunID, 0, in.WaitS)
}

// runResult waits (up to waitS) for the run to move past after and
// settle, and describes it.
func (s *Server) runResult(ctx context.Context, req *mcp.CallToolRequest, id string, after uint64, waitS float64) (*mcp.CallToolResult, RunResult, error) {
	if waitS <= 0 {
		r, err := s.c.Run(ctx, id)
		if err != nil {
			return nil, RunResult{}, toolError(err)
		}
		return nil, s.result(ctx, r), nil
	}
	r, err := s.waitRun(ctx, req, id, after, waitOf(waitS))
	if err != nil {
		return nil, RunResult{}, toolError(err)
	}
	return nil, s.result(ctx, r), nil
}

func (s *Server) knownRun(ctx context.Context, id string) (uint64, error) {
	if !events.ValidID(id) {
		return 0, fmt.Errorf("invalid_request: %q is not a run id", id)
	}
	r, err := s.c.Run(ctx, id)
	if err != nil {
		return 0, toolError(err)
	}
	if r.LastSeq == 0 {
		return 0, fmt.Errorf("not_found: no run %q", id)
	}
	return r.LastSeq, nil
}

func (s *Server) skillStatus(ctx context.Context, req *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, RunResult, error) {
	if _, err := s.knownRun(ctx, in.RunID); err != nil {
		return nil, RunResult{}, err
	}
	return s.runResult(ctx, req, in.RunID, 0, in.WaitS)
}

func (s *Server) skillContinue(ctx context.Context, req *mcp.CallToolRequest, in ContinueIn) (*mcp.CallToolResult, RunResult, error) {
	at, err := s.knownRun(ctx, in.RunID)
	if err != nil {
		return nil, RunResult{}, err
	}
	rep, err := s.c.Continue(ctx, command.ContinueRun{RunID: in.RunID, Choice: in.Choice, Reason: in.Reason, By: s.cfg.Identity})
	if err != nil {
		return nil, RunResult{}, toolError(err)
	}
	if in.WaitS <= 0 && rep.ConfirmID != "" {
		return s.pastQuestion(ctx, in.RunID, rep.ConfirmID)
	}
	return s.runResult(ctx, req, in.RunID, at, in.WaitS)
}

// pastQuestionWait bounds how long skill_continue without wait_s waits
// for the runner to take up the answer.
const pastQuestionWait = 5 * time.Second

// pastQuestion describes run id once it no longer waits at confirmation
// cid. The answer is in the log when Continue returns, and the runner
// resumes the run a moment later: read at once, the run still stood at
// the question just answered, and its "next" asked to answer it again
// (which then failed: the run was not paused). After pastQuestionWait
// (a runner that is down) the run is described as it stands.
func (s *Server) pastQuestion(ctx context.Context, id, cid string) (*mcp.CallToolResult, RunResult, error) {
	deadline := time.Now().Add(pastQuestionWait)
	for {
		r, err := s.c.Run(ctx, id)
		if err != nil {
			return nil, RunResult{}, toolError(err)
		}
		if r.Paused == nil || r.Paused.ConfirmID != cid || r.Terminal() || time.Now().After(deadline) {
			return nil, s.result(ctx, r), nil
		}
		select {
		case <-ctx.Done():
			return nil, s.result(ctx, r), nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) skillRetry(ctx context.Context, req *mcp.CallToolRequest, in RetryIn) (*mcp.CallToolResult, RunResult, error) {
	at, err := s.knownRun(ctx, in.RunID)
	if err != nil {
		return nil, RunResult{}, err
	}
	if _, err := s.c.Retry(ctx, command.RetryStep{RunID: in.RunID, Step: in.Step, Args: in.Args, Reason: in.Reason, By: s.cfg.Identity}); err != nil {
		return nil, RunResult{}, toolError(err)
	}
	return s.runResult(ctx, req, in.RunID, at, in.WaitS)
}

func (s *Server) skillCancel(ctx context.Context, req *mcp.CallToolRequest, in CancelIn) (*mcp.CallToolResult, RunResult, error) {
	if _, err := s.knownRun(ctx, in.RunID); err != nil {
		return nil, RunResult{}, err
	}
	if _, err := s.c.Cancel(ctx, command.CancelRun{RunID: in.RunID, Reason: in.Reason, By: s.cfg.Identity}); err != nil {
		return nil, RunResult{}, toolError(err)
	}
	return s.runResult(ctx, req, in.RunID, 0, 0)
}

func (s *Server) confirmRequest(ctx context.Context, _ *mcp.CallToolRequest, in ConfirmRequestIn) (*mcp.CallToolResult, ConfirmRequestOut, error) {
	opts := in.Options
	if len(opts) == 0 {
		opts = []events.Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}}
	}
	timeout := in.TimeoutS
	if timeout <= 0 {
		timeout = 300
	}
	rep, err := s.c.RequestConfirmation(ctx, command.RequestConfirmation{ConfirmRequestedData: events.ConfirmRequestedData{
		Title: in.Title, Message: in.Message, Options: opts, Default: in.Default, TimeoutS: timeout, Approvers: in.Approvers, Requester: s.cfg.Identity}})
	if err != nil {
		return nil, ConfirmRequestOut{}, toolError(err)
	}
	out := ConfirmRequestOut{ID: rep.ID, Deadline: rep.Deadline, Next: fmt.Sprintf("nobody has answered yet: the answer will be heed.confirm.%s.answered; subscribe to the resource heed://confirmations to be told when it leaves the pending list, or ask with wait_s next time", rep.ID)}
	if in.WaitS > 0 {
		wctx, cancel := context.WithTimeout(ctx, waitOf(in.WaitS))
		defer cancel()
		if st, err := s.c.WaitAnswer(wctx, rep.ID); err == nil && st.Answer != nil {
			a := st.Answer
			out.Answered, out.Choice, out.By, out.Method, out.Reason = true, a.Choice, a.By, a.Method, a.Reason
			out.Next = "answered"
		}
	}
	return nil, out, nil
}

func (s *Server) confirmAnswer(ctx context.Context, _ *mcp.CallToolRequest, in ConfirmAnswerIn) (*mcp.CallToolResult, command.AnswerReply, error) {
	rep, err := s.c.Answer(ctx, command.AnswerConfirmation{ID: in.ID, Choice: in.Choice, Reason: in.Reason, By: s.cfg.Identity, Channel: Channel})
	return nil, rep, toolError(err)
}

func (s *Server) escalationRequest(ctx context.Context, _ *mcp.CallToolRequest, in EscalationIn) (*mcp.CallToolResult, command.EscalationReply, error) {
	rep, err := s.c.RequestEscalation(ctx, command.RequestEscalation{ID: in.ID, EscalationRequestedData: events.EscalationRequestedData{
		Session: s.cfg.Identity, Operation: in.Operation, Scope: in.Scope, Environment: in.Environment, Risk: in.Risk, Confidence: in.Confidence,
		Title: in.Title, Message: in.Message, Requester: s.cfg.Identity}})
	return nil, rep, toolError(err)
}

func (s *Server) escalationStatus(ctx context.Context, _ *mcp.CallToolRequest, in EscalationStatusIn) (*mcp.CallToolResult, command.EscalationState, error) {
	st, err := s.c.EscalationStatus(ctx, in.ID)
	if err != nil || in.WaitS <= 0 || st.Status != events.EscalationHeld {
		return nil, st, toolError(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitOf(in.WaitS))
	defer cancel()
	if decided, err := s.c.WaitEscalation(wctx, in.ID); err == nil && decided != nil {
		return nil, *decided, nil
	}
	// Still held at the end of the wait: where it stands now.
	st, err = s.c.EscalationStatus(ctx, in.ID)
	return nil, st, toolError(err)
}

func (s *Server) escalationOutcome(ctx context.Context, _ *mcp.CallToolRequest, in EscalationOutcomeIn) (*mcp.CallToolResult, command.OutcomeReply, error) {
	rep, err := s.c.ReportOutcome(ctx, command.ReportOutcome{ID: in.ID, Outcome: in.Outcome, Detail: in.Detail, By: s.cfg.Identity})
	return nil, rep, toolError(err)
}

func (s *Server) sessionCanContinue(ctx context.Context, _ *mcp.CallToolRequest, _ SessionIn) (*mcp.CallToolResult, command.HeldReply, error) {
	rep, err := s.c.Held(ctx, s.cfg.Identity)
	return nil, rep, toolError(err)
}

func (s *Server) changeSetPropose(ctx context.Context, _ *mcp.CallToolRequest, in ProposeIn) (*mcp.CallToolResult, command.ProposeReply, error) {
	rep, err := s.c.ProposeChanges(ctx, command.ProposeChangeSet{Agent: s.cfg.Identity, Subject: in.Subject, Wake: in.Wake, Title: in.Title, Calls: in.Calls, ProposedBy: s.cfg.Identity})
	return nil, rep, toolError(err)
}

func (s *Server) decisionHistory(ctx context.Context, _ *mcp.CallToolRequest, in HistoryIn) (*mcp.CallToolResult, command.DecisionHistoryReply, error) {
	rep, err := s.c.DecisionHistory(ctx, command.DecisionHistoryRequest{Agent: s.cfg.Identity, Subject: in.Subject, Limit: in.Limit, BudgetTokens: in.BudgetTokens})
	if err != nil {
		return nil, rep, toolError(err)
	}
	// The text first: it is what goes into the agent's context.
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: rep.Text}}}, rep, nil
}

func (s *Server) checkKnownIssues(ctx context.Context, _ *mcp.CallToolRequest, in KnownIssuesIn) (*mcp.CallToolResult, KnownIssuesOut, error) {
	out := KnownIssuesOut{Tool: in.Tool, Issues: s.knownIssues(ctx, in.Tool), Patterns: []PatternInfo{}}
	if out.Issues == nil {
		out.Issues = []events.KnownIssue{}
	}
	patterns, err := s.c.Patterns(ctx)
	if err != nil {
		return nil, out, toolError(err)
	}
	now := time.Now()
	for _, p := range patterns {
		if p.Tool == in.Tool && p.Active(now, 0) {
			out.Patterns = append(out.Patterns, PatternInfo{Signature: p.Signature, Hint: p.Hint, Occurrences: p.Occurrences, Confidence: p.Confidence})
		}
	}
	switch {
	case len(out.Issues) == 0 && len(out.Patterns) == 0:
		out.Advice = "no known issues: call it"
	default:
		out.Advice = "known failures: heed applies the learned fixes by itself when a run's call fails; avoid the patterns' shapes of args"
	}
	return nil, out, nil
}

func (s *Server) learnToolFix(ctx context.Context, _ *mcp.CallToolRequest, in LearnFixIn) (*mcp.CallToolResult, command.FixReply, error) {
	rep, err := s.c.LearnFix(ctx, command.LearnFix{Tool: in.Tool, Match: in.Match, Description: in.Description, RootCause: in.RootCause, ArgsPatch: in.ArgsPatch, By: s.cfg.Identity})
	return nil, rep, toolError(err)
}

func (s *Server) stats(ctx context.Context, _ *mcp.CallToolRequest, _ StatsIn) (*mcp.CallToolResult, StatsOut, error) {
	st, err := s.c.Stats(ctx)
	if err != nil {
		return nil, StatsOut{}, toolError(err)
	}
	est, err := s.c.EscalationStats(ctx)
	if err != nil {
		return nil, StatsOut{}, toolError(err)
	}
	cst, err := s.c.ChangeStats(ctx)
	if err != nil {
		return nil, StatsOut{}, toolError(err)
	}
	return nil, emptyStats(StatsOut{AutoHealRate: st.AutoHealRate(), TotalFailures: st.TotalFailures, AutoFixed: st.AutoFixed, AgentFixed: st.AgentFixed,
		ManualRequired: st.ManualRequired, FixesLearned: st.FixesLearned, Escalations: est, ChangeSets: cst}), nil
}

// emptyStats gives out's nil maps and lists their empty values: the SDK
// checks the output against the schema of StatsOut, where a map is an
// object and null is refused as a protocol error (a heed with no
// escalation yet has no counts by route).
func emptyStats(out StatsOut) StatsOut {
	e := &out.Escalations
	for _, m := range []*map[string]int{&e.Routed, &e.Decided, &e.Escalated} {
		if *m == nil {
			*m = map[string]int{}
		}
	}
	if e.Daily == nil {
		e.Daily = map[string]readmodel.EscalationPeriod{}
	}
	if out.ChangeSets == nil {
		out.ChangeSets = []readmodel.ChangeStats{}
	}
	for i := range out.ChangeSets {
		if out.ChangeSets[i].Tools == nil {
			out.ChangeSets[i].Tools = map[string]readmodel.ToolDecisions{}
		}
	}
	return out
}
