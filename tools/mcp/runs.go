package heedmcp

import (
	"context"
	"fmt"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RunResult is what every skill tool returns: where the run stands and,
// when it waits for the agent or a person, what it waits for and what to
// call next. A pause is a result, not an error.
type RunResult struct {
	RunID  string `json:"run_id"`
	Skill  string `json:"skill"`
	Status string `json:"status" jsonschema:"requested, running, paused, completed, failed, cancelled or abandoned"`
	// Awaiting is the question the run waits at (status paused).
	Awaiting *Awaiting `json:"awaiting,omitempty"`
	// Failure is the step that failed, with what heed knows about it.
	Failure *Failure       `json:"failure,omitempty"`
	Outputs map[string]any `json:"outputs,omitempty"`
	Summary string         `json:"summary,omitempty"`
	// Recent are the last steps' outcomes, oldest first.
	Recent []runstate.Outcome `json:"recent,omitempty"`
	// Next says what to call next.
	Next string `json:"next"`
}

// Awaiting is a paused run's question, with the context the runner gives
// whoever answers.
type Awaiting struct {
	Kind      string          `json:"kind" jsonschema:"confirmation (a question with options) or agent (a failed step handed to you)"`
	ConfirmID string          `json:"confirm_id,omitempty"`
	Step      string          `json:"step"`
	Message   string          `json:"message"`
	Options   []events.Option `json:"options,omitempty"`
	Default   string          `json:"default,omitempty"`
	Deadline  time.Time       `json:"deadline,omitzero"`
	// RecentSteps and Variables are the run's context for the question.
	RecentSteps any `json:"recent_steps,omitempty"`
	Variables   any `json:"variables,omitempty"`
}

// Failure is a failed step: the error, the args it was called with, the
// tool's known issues, and the healer's context when it handed the
// failure to the agent.
type Failure struct {
	Step          string              `json:"step"`
	Tool          string              `json:"tool,omitempty"`
	Attempt       int                 `json:"attempt,omitempty"`
	Error         events.ErrorInfo    `json:"error"`
	Args          map[string]any      `json:"args,omitempty"`
	KnownIssues   []events.KnownIssue `json:"known_issues,omitempty"`
	HealerContext map[string]any      `json:"healer_context,omitempty"`
	Question      string              `json:"question,omitempty"`
}

// settled says a run stopped moving for now: it waits, or it ended. A
// pause whose step has completed is over: the runner writes the step's
// result, then the resume, one after the other, and a read between the two
// sees the run still paused.
func settled(r *runstate.Run) bool {
	if r.Terminal() {
		return true
	}
	if r.Status != runstate.StatusPaused {
		return false
	}
	if p := r.Paused; p != nil && p.Index >= 0 && p.Index < len(r.Steps) && r.Steps[p.Index].Status == runstate.StepCompleted {
		return false
	}
	return true
}

// waitRun follows a run until it has moved past after (a log position)
// and settled, or wait passes, reporting each finished step as progress
// when the caller asked for progress. It returns the run as it stands.
func (s *Server) waitRun(ctx context.Context, req *mcp.CallToolRequest, id string, after uint64, wait time.Duration) (*runstate.Run, error) {
	deadline := time.Now().Add(wait)
	var token any
	if req != nil && req.Params != nil {
		token = req.Params.GetProgressToken()
	}
	reported := 0
	pause := 20 * time.Millisecond
	for {
		r, err := s.c.Run(ctx, id)
		if err != nil {
			return nil, err
		}
		if token != nil && req.Session != nil {
			done := 0
			for _, st := range r.Steps {
				if st.Status == runstate.StepCompleted || st.Status == runstate.StepSkipped {
					done++
				}
			}
			if done > reported {
				reported = done
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(done), Total: float64(len(r.Steps)),
					Message: fmt.Sprintf("run %s: %d of %d steps done (%s)", id, done, len(r.Steps), r.Status)})
			}
		}
		if (r.LastSeq > after && settled(r)) || r.Terminal() || time.Now().After(deadline) {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, nil
		case <-time.After(pause):
		}
		pause = min(pause*2, 250*time.Millisecond)
	}
}

// result describes a run for the agent.
func (s *Server) result(ctx context.Context, r *runstate.Run) RunResult {
	out := RunResult{RunID: r.ID, Skill: r.SkillName, Status: r.Status, Recent: r.Recent}
	switch {
	case r.Status == runstate.StatusPaused && r.Paused != nil && r.Paused.Reason == events.PauseAwaitingConfirmation:
		a := &Awaiting{Kind: "confirmation", ConfirmID: r.Paused.ConfirmID, Step: r.Paused.Step, Message: r.Paused.Message}
		if st, err := s.c.Confirmation(ctx, r.Paused.ConfirmID); err == nil && st.Request != nil {
			req := st.Request
			a.Message, a.Options, a.Default = req.Message, req.Options, st.Gate.Default
			a.Deadline = st.Deadline()
			a.RecentSteps, a.Variables = req.Context["recent_steps"], req.Context["variables"]
		}
		out.Awaiting = a
		out.Next = fmt.Sprintf("the run waits for an answer to %q: call skill_continue with run_id %s and one of the options as choice (and a reason), or let a person answer; skill_cancel stops it", a.Message, r.ID)
	case r.Status == runstate.StatusPaused && r.Paused != nil && r.Paused.Reason == events.PauseAwaitingAgent:
		out.Failure = s.failure(ctx, r, r.Paused.Index)
		out.Awaiting = &Awaiting{Kind: "agent", Step: r.Paused.Step, Message: r.Paused.Message}
		out.Next = fmt.Sprintf("step %s failed and heed handed it to you: call skill_retry_step with run_id %s and corrected args (heed learns the correction as a fix if the retry succeeds), or skill_continue without a choice to let the step's on_error apply", r.Paused.Step, r.ID)
	case r.Status == runstate.StatusFailed:
		if i := failedStep(r); i >= 0 {
			out.Failure = s.failure(ctx, r, i)
		} else if r.Failure != nil {
			out.Failure = &Failure{Error: *r.Failure}
		}
		out.Next = fmt.Sprintf("the run failed: skill_retry_step with run_id %s and corrected args retries the failed step (heed learns the correction if it succeeds)", r.ID)
	case r.Status == runstate.StatusCompleted:
		out.Outputs = r.Outputs()
		out.Next = "the run completed"
	case r.Terminal():
		out.Next = "the run is over (" + r.Status + ")"
	default:
		out.Next = fmt.Sprintf("the run is still going: call skill_status with run_id %s and wait_s to wait for it", r.ID)
	}
	return out
}

func failedStep(r *runstate.Run) int {
	for i := len(r.Steps) - 1; i >= 0; i-- {
		if r.Steps[i].Status == runstate.StepFailed {
			return i
		}
	}
	return -1
}

// failure describes step i's last failed attempt.
func (s *Server) failure(ctx context.Context, r *runstate.Run, i int) *Failure {
	if i < 0 || i >= len(r.Steps) {
		return nil
	}
	st := r.Steps[i]
	f := &Failure{Step: st.Name, Attempt: st.Attempt, Args: st.Args}
	if st.Error != nil {
		f.Error = *st.Error
	}
	if r.Skill != nil && i < len(r.Skill.Steps) {
		f.Tool = r.Skill.Steps[i].Tool
	}
	if a := r.Current(i); a != nil && a.Escalated != nil {
		f.HealerContext, f.Question = a.Escalated.Context, a.Escalated.Question
	}
	if f.Tool != "" {
		f.KnownIssues = s.knownIssues(ctx, f.Tool)
	}
	return f
}

// knownIssues are the learned fixes of a tool, as known issues.
func (s *Server) knownIssues(ctx context.Context, tool string) []events.KnownIssue {
	fixes, err := s.c.Fixes(ctx)
	if err != nil {
		return nil
	}
	var out []events.KnownIssue
	for _, f := range fixes {
		if f.Tool == tool && f.Usable() {
			out = append(out, issueOf(f))
		}
	}
	return out
}

func issueOf(f readmodel.Fix) events.KnownIssue {
	return events.KnownIssue{Tool: f.Tool, Pattern: f.ErrorPattern, Description: f.Description, FixID: f.ID, Confidence: f.Confidence}
}
