package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/runner/skill"
	"github.com/heedhq/heed/services/runner/tool"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// Command subjects (request/reply; never captured by a stream).
const (
	SubjectStart    = events.CommandPrefix + ".run.start"
	SubjectContinue = events.CommandPrefix + ".run.continue"
	SubjectRetry    = events.CommandPrefix + ".run.retry"
	SubjectCancel   = events.CommandPrefix + ".run.cancel"
)

// StartRequest asks for a run of a skill.
type StartRequest struct {
	Skill struct {
		Source string `json:"source"`
		File   string `json:"file,omitempty"`
	} `json:"skill"`
	Inputs      map[string]any `json:"inputs,omitempty"`
	Yes         bool           `json:"yes,omitempty"`
	Agent       string         `json:"agent,omitempty"`
	RequestedBy string         `json:"requested_by,omitempty"`
	// RequestID makes a retried start request start one run, not two.
	RequestID string `json:"request_id,omitempty"`
}

// ContinueRequest answers a paused run's confirmation (or resumes a run
// waiting for its agent).
type ContinueRequest struct {
	RunID  string `json:"run_id"`
	Choice string `json:"choice"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// RetryRequest starts a new attempt of a failed step with corrected args.
type RetryRequest struct {
	RunID  string         `json:"run_id"`
	Step   string         `json:"step,omitempty"` // default: the failed step
	Args   map[string]any `json:"args,omitempty"` // merged over the failed attempt's args
	Reason string         `json:"reason,omitempty"`
	By     string         `json:"by,omitempty"`
}

// CancelRequest cancels a run.
type CancelRequest struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

// Reply is every command's success reply.
type Reply struct {
	RunID     string `json:"run_id"`
	ConfirmID string `json:"confirm_id,omitempty"`
	Status    string `json:"status,omitempty"`
}

// commands serves the runner's request/reply API.
type commands struct {
	e     *engine
	tools *tool.Registry
}

func (c *commands) register(svc micro.Service) error {
	g := svc.AddGroup(events.CommandPrefix + ".run")
	for name, h := range map[string]func(context.Context, []byte) (any, error){
		"start": c.start, "continue": retrying(c.continueRun), "retry": retrying(c.retry), "cancel": retrying(c.cancel),
	} {
		h := h
		err := g.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			out, err := h(ctx, req.Data())
			if err != nil {
				code := events.CodeOf(err)
				_ = req.Error(string(code), oneLine(err.Error()), []byte(err.Error()))
				return
			}
			_ = req.RespondJSON(out)
		}))
		if err != nil {
			return err
		}
	}
	return nil
}

// errStale marks a command that lost the race with another append to the
// run; it is re-read and decided again.
var errStale = errors.New("run changed")

// retrying re-runs a command that lost an optimistic-concurrency race: the
// run is read again and the command decided again on the new state.
func retrying(h func(context.Context, []byte) (any, error)) func(context.Context, []byte) (any, error) {
	return func(ctx context.Context, b []byte) (any, error) {
		for attempt := 0; ; attempt++ {
			out, err := h(ctx, b)
			if !errors.Is(err, errStale) {
				return out, err
			}
			if attempt == 9 {
				return nil, events.Errorf(events.CodeConflict, "the run keeps changing; try again")
			}
			time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond)
		}
	}
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r", " "), "\n", "; ")
}

func decodeRequest(b []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return events.Errorf(events.CodeInvalidRequest, "request is not valid JSON for this command: %v", err)
	}
	return nil
}

func (c *commands) start(ctx context.Context, b []byte) (any, error) {
	var req StartRequest
	if err := decodeRequest(b, &req); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.Skill.Source) == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "skill.source is empty")
	}
	sk, err := skill.Load(req.Skill.File, []byte(req.Skill.Source))
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "skill does not load:\n%v", err)
	}
	if missing := missingTools(sk, c.tools); len(missing) > 0 {
		return nil, events.Errorf(events.CodeInvalidRequest, "skill %s uses tools the runner does not have: %s (tools file: %s)", sk.Name, strings.Join(missing, ", "), toolsFile(c.tools))
	}
	inputs, err := sk.ResolveInputs(req.Inputs)
	if err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "skill %s: %v", sk.Name, err)
	}
	id := newRunID(req.RequestID)
	by := req.RequestedBy
	if by == "" {
		by = "unknown"
	}
	ev, err := events.NewEvent(events.RunRequested, id, id+"/requested", Source, events.RunRequestedData{
		Skill:  events.SkillRef{Name: sk.Name, Source: sk.Source, Digest: sk.Digest, File: req.Skill.File},
		Inputs: inputs, Yes: req.Yes, RequestedBy: by, Agent: req.Agent, RequestID: req.RequestID,
	})
	if err != nil {
		return nil, err
	}
	if _, err := c.e.bus.Publish(ctx, &ev); err != nil {
		return nil, err
	}
	return Reply{RunID: id, Status: StatusRequested}, nil
}

func missingTools(sk *skill.Skill, reg *tool.Registry) []string {
	var out []string
	seen := map[string]bool{}
	for _, st := range sk.Steps {
		if st.Kind == skill.KindTool && !seen[st.Tool] {
			seen[st.Tool] = true
			if _, ok := reg.Get(st.Tool); !ok {
				out = append(out, st.Tool)
			}
		}
	}
	return out
}

func toolsFile(reg *tool.Registry) string {
	if reg == nil || reg.File == "" {
		return "none loaded; start heed with --tools FILE"
	}
	return reg.File
}

// newRunID is a time-ordered id; with a request id it is derived from it so
// that a retried start request maps to the same run.
func newRunID(requestID string) string {
	if requestID == "" {
		return strings.ToLower(ulid.Make().String())
	}
	sum := sha256.Sum256([]byte("heed-run:" + requestID))
	return "r" + hex.EncodeToString(sum[:12])
}

// loadRun reads a run from the log for a command.
func (c *commands) loadRun(ctx context.Context, id string) (*RunState, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid run id", id)
	}
	r := newRun(id)
	_, err := events.ReadLog(ctx, c.e.bus.JetStream(), events.EventStream, []string{events.SubjectFilter("run", id)}, 0, func(raw events.RawMsg) error {
		// Count every message's position, valid or not: the stream's
		// expected-sequence check counts them all.
		r.LastSeq = max(r.LastSeq, raw.Seq)
		ev, err := c.e.bus.Codec().DecodeStored(raw)
		if err != nil {
			return nil
		}
		return r.Apply(ev, raw.Seq, c.e.skills)
	})
	if err != nil {
		return nil, err
	}
	if r.LastSeq == 0 {
		return nil, events.Errorf(events.CodeNotFound, "no run %q", id)
	}
	return r, nil
}

// publishRunEvent appends to a run only if nothing else was appended since
// the command read it: commands and the engine never act on stale state.
func (c *commands) publishRunEvent(ctx context.Context, r *RunState, evs ...events.Event) error {
	for i := range evs {
		opts := []events.PublishOption{}
		if i == 0 {
			opts = append(opts, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("run", r.ID), Seq: r.LastSeq})
		}
		if _, err := c.e.bus.Publish(ctx, &evs[i], opts...); err != nil {
			if errors.Is(err, events.ErrConflict) {
				return fmt.Errorf("%w: %v", errStale, err)
			}
			return err
		}
	}
	return nil
}

func (c *commands) cancel(ctx context.Context, b []byte) (any, error) {
	var req CancelRequest
	if err := decodeRequest(b, &req); err != nil {
		return nil, err
	}
	r, err := c.loadRun(ctx, req.RunID)
	if err != nil {
		return nil, err
	}
	if r.Terminal() {
		return nil, events.Errorf(events.CodeConflict, "run %s is already %s", r.ID, r.Status)
	}
	ev, err := events.NewEvent(events.RunCancelled, r.ID, r.ID+"/cancelled", Source, events.RunCancelledData{By: actor(req.By), Reason: req.Reason})
	if err != nil {
		return nil, err
	}
	if err := c.publishRunEvent(ctx, r, ev); err != nil {
		return nil, err
	}
	return Reply{RunID: r.ID, Status: StatusCancelled}, nil
}

func (c *commands) continueRun(ctx context.Context, b []byte) (any, error) {
	var req ContinueRequest
	if err := decodeRequest(b, &req); err != nil {
		return nil, err
	}
	r, err := c.loadRun(ctx, req.RunID)
	if err != nil {
		return nil, err
	}
	paused := r.Paused
	if paused == nil {
		// The healer may have handed a failure to the agent a moment before
		// the runner recorded the pause: the agent may answer already.
		for i, ss := range r.Steps {
			if ss.Status == StepFailed && ss.Heal.Attempt == ss.Attempt && ss.Heal.Escalated != nil && !r.Terminal() {
				paused = &events.RunPausedData{Reason: events.PauseAwaitingAgent, Step: ss.Heal.Escalated.Step, Index: i}
			}
		}
	}
	if paused == nil {
		return nil, events.Errorf(events.CodeConflict, "run %s is %s, not paused", r.ID, r.Status)
	}
	r.Paused = paused
	switch r.Paused.Reason {
	case events.PauseAwaitingConfirmation:
		if req.Choice == "" {
			return nil, events.Errorf(events.CodeInvalidRequest, "continue needs a choice for confirmation %s", r.Paused.ConfirmID)
		}
		_, err := confirm.Answer(ctx, c.e.bus, Source, r.Paused.ConfirmID, events.ConfirmAnsweredData{
			Choice: req.Choice, Method: events.MethodAgent, By: actor(req.By), Channel: "continue", Reason: req.Reason,
		})
		if err != nil {
			return nil, err
		}
		return Reply{RunID: r.ID, ConfirmID: r.Paused.ConfirmID, Status: StatusRunning}, nil
	}
	// Awaiting the agent after a failure: continuing lets on_error apply
	// (to retry with corrected args, use retry).
	ev, err := events.NewEvent(events.RunResumed, r.ID, fmt.Sprintf("%s/resumed/%d", r.ID, r.LastSeq), Source, events.RunResumedData{
		Step: r.Paused.Step, Index: r.Paused.Index, Choice: ChoiceOnError, Method: events.MethodAgent, By: actor(req.By), Reason: req.Reason,
	})
	if err != nil {
		return nil, err
	}
	if err := c.publishRunEvent(ctx, r, ev); err != nil {
		return nil, err
	}
	return Reply{RunID: r.ID, Status: StatusRunning}, nil
}

func (c *commands) retry(ctx context.Context, b []byte) (any, error) {
	var req RetryRequest
	if err := decodeRequest(b, &req); err != nil {
		return nil, err
	}
	r, err := c.loadRun(ctx, req.RunID)
	if err != nil {
		return nil, err
	}
	if !r.Requested || r.Skill == nil {
		return nil, events.Errorf(events.CodeConflict, "run %s is not driven by the runner; its agent retries its own steps", r.ID)
	}
	idx := -1
	for i, st := range r.Skill.Steps {
		if r.Steps[i].Status == StepFailed && (req.Step == "" || req.Step == st.Name) {
			idx = i
			if req.Step == "" {
				break
			}
		}
	}
	if idx < 0 {
		if req.Step != "" {
			return nil, events.Errorf(events.CodeConflict, "step %q of run %s has not failed", req.Step, r.ID)
		}
		return nil, events.Errorf(events.CodeConflict, "run %s has no failed step to retry", r.ID)
	}
	if r.Status == StatusCompleted || r.Status == StatusCancelled {
		return nil, events.Errorf(events.CodeConflict, "run %s is %s", r.ID, r.Status)
	}
	st, ss := r.Skill.Steps[idx], r.Steps[idx]
	if st.Kind != skill.KindTool {
		return nil, events.Errorf(events.CodeInvalidRequest, "step %q is a %s step; only tool steps take corrected args", st.Name, st.Kind)
	}
	args := map[string]any{}
	for k, v := range ss.Args {
		args[k] = v
	}
	for k, v := range req.Args {
		args[k] = v
	}
	next := ss.Attempt + 1
	var evs []events.Event
	if r.Status == StatusFailed || r.Status == StatusPaused {
		res, err := events.NewEvent(events.RunResumed, r.ID, r.ID+"/"+stepSuffix(idx, next, "resumed"), Source, events.RunResumedData{
			Step: st.Name, Index: idx, Method: events.MethodAgent, By: actor(req.By), Reason: retryReason(req.Reason),
		})
		if err != nil {
			return nil, err
		}
		evs = append(evs, res)
	}
	start, err := c.e.startEvent(r, idx, next, args, "retry")
	if err != nil {
		return nil, err
	}
	start.SetExtension("causationid", "retry")
	evs = append(evs, *start)
	if err := c.publishRunEvent(ctx, r, evs...); err != nil {
		return nil, err
	}
	return Reply{RunID: r.ID, Status: StatusRunning}, nil
}

func retryReason(r string) string {
	if r == "" {
		return "retry with corrected args"
	}
	return r
}

func actor(by string) string {
	if strings.TrimSpace(by) == "" {
		return "unknown"
	}
	return by
}
