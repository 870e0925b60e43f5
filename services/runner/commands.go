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
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// commands serves the runner's request/reply API (see events/command).
type commands struct {
	e     *engine
	tools *tool.Registry
	// lagWait bounds how long a command waits for the log to show what
	// its caller has already seen (see awaitRun).
	lagWait time.Duration
	// largeSlot lets one large skill compile at a time.
	largeSlot chan struct{}
	// current refuses commands while this instance may not act
	// (service.Runtime.Current); nil: always may.
	current func() error
}

// largeSkill is the size above which a skill's start takes its turn.
const largeSkill = 32 << 10

// commandTimeout bounds one command's work.
const commandTimeout = 15 * time.Second

func (c *commands) register(ctx context.Context, svc micro.Service) error {
	v := c.e.bus.Codec().Validator()
	dl := c.deadLetters()
	g := svc.AddGroup(events.CommandPrefix + ".run")
	for name, h := range map[string]micro.Handler{
		"start":    command.Handler(ctx, v, command.RunStart, commandTimeout, c.start, dl),
		"continue": command.Handler(ctx, v, command.RunContinue, commandTimeout, retrying(c.continueRun), dl),
		"retry":    command.Handler(ctx, v, command.RunRetry, commandTimeout, retrying(c.retry), dl),
		"cancel":   command.Handler(ctx, v, command.RunCancel, commandTimeout, retrying(c.cancel), dl),
		"get":      command.Handler(ctx, v, command.RunGet, commandTimeout, c.get, dl),
	} {
		if err := g.AddEndpoint(name, h); err != nil {
			return err
		}
	}
	return c.registerAgentPath(ctx, svc)
}

// deadLetters dead-letters a failed command that came without a reply
// subject (see command.DeadLetters).
func (c *commands) deadLetters() command.Option {
	opts := command.All{command.DeadLetters{Bus: c.e.bus, Service: "heed-runner-commands", Log: c.e.log}}
	if c.current != nil {
		opts = append(opts, command.Gate(c.current))
	}
	return opts
}

// retrying re-runs a command that lost an optimistic-concurrency race
// (its write found the run changed since it read it): the run is read
// again and the command decided again on the new state.
func retrying[Req any](h command.Func[Req]) command.Func[Req] {
	return func(ctx context.Context, req *Req) (any, error) {
		out, err := events.RetryStale(ctx, 10, func() (any, error) { return h(ctx, req) })
		if errors.Is(err, events.ErrStaleRead) {
			return nil, events.Errorf(events.CodeConflict, "the run keeps changing; try again")
		}
		return out, err
	}
}

func (c *commands) start(ctx context.Context, req *command.StartRun) (any, error) {
	return c.startRun(ctx, req, "")
}

// startRun starts a run; scope, when set, is the agent whose path the
// request came on: its request ids are its own (another agent's request
// with the same id starts another run).
func (c *commands) startRun(ctx context.Context, req *command.StartRun, scope string) (any, error) {
	if strings.TrimSpace(req.Skill.Source) == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "skill.source is empty")
	}
	// A large skill takes a while to compile (every expression): those
	// take turns, one at a time, so that they never keep the CPU from the
	// small requests that make up nearly all of them.
	if len(req.Skill.Source) > largeSkill {
		select {
		case c.largeSlot <- struct{}{}:
			defer func() { <-c.largeSlot }()
		case <-ctx.Done():
			return nil, events.Errorf(events.CodeBusy, "too many large skills are being started; try again")
		}
	}
	// Compiled once per process (by content): the runner's own cache,
	// which the run itself will use.
	sk, err := c.e.skills.Load(req.Skill.File, req.Skill.Source)
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
	id := newRunID(scope, req.RequestID)
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
	// What the event contract refuses (too large, an agent name it does
	// not allow) is the caller's mistake, not heed's.
	if err := c.e.bus.Codec().Check(&ev); err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "the run cannot be recorded: %v", err)
	}
	if req.RequestID == "" {
		if _, err := c.e.bus.Publish(ctx, &ev); err != nil {
			return nil, err
		}
		return command.RunReply{RunID: id, Status: runstate.StatusRequested}, nil
	}
	// A request id names one run: written only if the run has no request
	// yet (a retry within the duplicate window is dropped by its id, one
	// after it by the guard), and a second request under the id gets that
	// run if it asks for the same, a conflict if not.
	ack, err := c.e.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.RunRequested.Subject(id), Seq: 0})
	switch {
	case errors.Is(err, events.ErrStaleRead):
	case err != nil:
		return nil, err
	case !ack.Duplicate:
		return command.RunReply{RunID: id, Status: runstate.StatusRequested}, nil
	}
	return c.startedBefore(ctx, id, &ev)
}

// startedBefore answers a start whose request id has a run already: that
// run, if the first request asked for the same skill, inputs, agent and
// --yes; a conflict if not.
func (c *commands) startedBefore(ctx context.Context, id string, ev *events.Event) (any, error) {
	first, _, err := events.FirstOf(ctx, c.e.bus.JetStream(), events.EventStream, events.RunRequested.Subject(id), 0)
	if err != nil {
		return nil, err
	}
	var want, got events.RunRequestedData
	if err := json.Unmarshal(ev.Data(), &want); err != nil {
		return nil, err
	}
	if first == nil || json.Unmarshal(first.Data, &got) != nil {
		return nil, events.Errorf(events.CodeUnavailable, "run %s: its request is not readable yet; try again", id)
	}
	wantIn, _ := json.Marshal(want.Inputs)
	gotIn, _ := json.Marshal(got.Inputs)
	if got.Skill.Digest != want.Skill.Digest || string(gotIn) != string(wantIn) || got.Agent != want.Agent || got.Yes != want.Yes {
		return nil, events.Errorf(events.CodeConflict, "request id %q started run %s with other content (skill %s, inputs %s); a new run needs a new request id", want.RequestID, id, got.Skill.Name, textutil.Cut(string(gotIn), 200))
	}
	r, err := c.loadRun(ctx, id, nil)
	if err != nil {
		return nil, err
	}
	return command.RunReply{RunID: id, Status: r.Status}, nil
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
func newRunID(scope, requestID string) string {
	if requestID == "" {
		return strings.ToLower(ulid.Make().String())
	}
	key := "heed-run:" + requestID
	if scope != "" {
		key = "heed-run:" + scope + ":" + requestID
	}
	sum := sha256.Sum256([]byte(key))
	return "r" + hex.EncodeToString(sum[:12])
}

// loadRun reads a run from the log for a command, onto r (nil: a new
// state, read whole) from r's LastSeq on. A new state of a run waiting
// for an answer is read by the positions of its messages, as the answer's
// load reads it (engine.load), and by subject if that does not hold.
func (c *commands) loadRun(ctx context.Context, id string, r *runstate.Run) (*runstate.Run, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid run id", id)
	}
	read := false
	if r == nil {
		pr, err := c.e.byPositions(ctx, id, c.e.positions(id))
		if err != nil {
			return nil, err
		}
		if r, read = pr, pr != nil; r == nil {
			r = runstate.New(id)
		}
	}
	if !read {
		if err := r.CatchUp(ctx, c.e.bus, c.e.skills); err != nil {
			return nil, err
		}
	}
	if r.LastSeq == 0 {
		return nil, events.Errorf(events.CodeNotFound, "no run %q", id)
	}
	return r, nil
}

// awaitRun reads a run and, while it is not yet in the state the command
// needs (ready) and has not ended, follows the log for up to lagWait. A
// caller may have seen an event before JetStream stored it (a core NATS
// subscriber on heed.run.<id>.paused gets the message as the stream
// receives it): a command must judge the run as its caller saw it, not
// refuse the caller for being quick.
//
// In the normal case that is one read. Otherwise the command subscribes to
// the run's subjects and reads again when something is published there;
// reads at growing intervals catch the one event the subscription cannot
// see: the one published before it, still on its way into the stream.
func (c *commands) awaitRun(ctx context.Context, id string, ready func(*runstate.Run) bool) (*runstate.Run, error) {
	r, err := c.loadRun(ctx, id, nil)
	if err != nil {
		return nil, err
	}
	if ready(r) || r.Terminal() || c.lagWait <= 0 {
		return r, nil
	}
	deadline := time.Now().Add(c.lagWait)
	wake := make(chan struct{}, 1)
	sub, err := c.e.bus.Conn().Subscribe(events.SubjectFilter("run", id), func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("follow run %s: %v", id, err), Err: err}
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The subscription reaches the server before this read (one
	// connection, in order): whatever is published from here on wakes us.
	if r, err = c.loadRun(ctx, id, r); err != nil {
		return nil, err
	}
	const firstWait = 5 * time.Millisecond
	for wait := firstWait; !ready(r) && !r.Terminal(); wait = min(4*wait, 320*time.Millisecond) {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-wake:
			// Published, perhaps not yet stored: look again soon after.
			wait = firstWait / 2
		case <-t.C:
		}
		t.Stop()
		if r, err = c.loadRun(ctx, id, r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// publishRunEvent appends to a run only if nothing else was appended since
// the command read it: commands and the engine never act on stale state.
func (c *commands) publishRunEvent(ctx context.Context, r *runstate.Run, evs ...events.Event) error {
	for i := range evs {
		opts := []events.PublishOption{}
		if i == 0 {
			opts = append(opts, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("run", r.ID), Seq: r.LastSeq})
		}
		if _, err := c.e.bus.Publish(ctx, &evs[i], opts...); err != nil {
			return err // ErrStaleRead: the run changed since it was read
		}
	}
	return nil
}

func (c *commands) cancel(ctx context.Context, req *command.CancelRun) (any, error) {
	r, err := c.loadRun(ctx, req.RunID, nil)
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
	return command.RunReply{RunID: r.ID, Status: runstate.StatusCancelled}, nil
}

// pause is what a run waits for from its agent, if anything: the paused
// event, or a failure the healer handed to the agent a moment before the
// runner recorded the pause (the agent may answer already).
func pause(r *runstate.Run) *events.RunPausedData {
	if r.Terminal() {
		return nil
	}
	if r.Paused != nil {
		return r.Paused
	}
	for i, ss := range r.Steps {
		if h := r.Current(i); ss.Status == runstate.StepFailed && h.Escalated != nil && !h.OnErrorApplies() {
			return &events.RunPausedData{Reason: events.PauseAwaitingAgent, Step: h.Escalated.Step, Index: i}
		}
	}
	return nil
}

func (c *commands) continueRun(ctx context.Context, req *command.ContinueRun) (any, error) {
	r, err := c.awaitRun(ctx, req.RunID, func(r *runstate.Run) bool { return pause(r) != nil })
	if err != nil {
		return nil, err
	}
	paused := pause(r)
	if paused == nil {
		return nil, events.Errorf(events.CodeConflict, "run %s is %s, not paused", r.ID, r.Status)
	}
	if paused.Reason == events.PauseAwaitingConfirmation {
		if req.Choice == "" {
			return nil, events.Errorf(events.CodeInvalidRequest, "continue needs a choice for confirmation %s", paused.ConfirmID)
		}
		st, err := confirmation.Answer(ctx, c.e.bus, Source, paused.ConfirmID, events.ConfirmAnsweredData{
			Choice: req.Choice, Method: events.MethodAgent, By: actor(req.By), Channel: "agent", Reason: req.Reason,
		})
		if err != nil {
			return nil, err
		}
		if st.Answer == nil {
			// A vote towards the confirmation's quorum: still paused.
			return command.RunReply{RunID: r.ID, ConfirmID: paused.ConfirmID, Status: runstate.StatusPaused}, nil
		}
		return command.RunReply{RunID: r.ID, ConfirmID: paused.ConfirmID, Status: runstate.StatusRunning}, nil
	}
	// Awaiting the agent after a failure: continuing lets on_error apply
	// (to retry with corrected args, use retry).
	ev, err := events.NewEvent(events.RunResumed, r.ID, fmt.Sprintf("%s/resumed/%d", r.ID, r.LastSeq), Source, events.RunResumedData{
		Step: paused.Step, Index: paused.Index, Choice: runstate.ChoiceOnError, Method: events.MethodAgent, By: actor(req.By), Reason: req.Reason,
	})
	if err != nil {
		return nil, err
	}
	if err := c.publishRunEvent(ctx, r, ev); err != nil {
		return nil, err
	}
	return command.RunReply{RunID: r.ID, Status: runstate.StatusRunning}, nil
}

// knownStep refuses a step name the run's skill does not have: the
// caller's mistake (invalid_request, with the closest name), not a state
// of the run.
func knownStep(r *runstate.Run, step string) error {
	names := make([]string, len(r.Skill.Steps))
	for i, st := range r.Skill.Steps {
		if st.Name == step {
			return nil
		}
		names[i] = st.Name
	}
	return events.Errorf(events.CodeInvalidRequest, "skill %s of run %s has no step %q (steps: %s)%s", r.Skill.Name, r.ID, step, strings.Join(names, ", "), textutil.Hint(step, names))
}

// failedStep is the index of the step a retry applies to, or -1.
func failedStep(r *runstate.Run, step string) int {
	if r.Skill == nil {
		return -1
	}
	for i, st := range r.Skill.Steps {
		if r.Steps[i].Status == runstate.StepFailed && (step == "" || step == st.Name) {
			return i
		}
	}
	return -1
}

func (c *commands) retry(ctx context.Context, req *command.RetryStep) (any, error) {
	r, err := c.awaitRun(ctx, req.RunID, func(r *runstate.Run) bool { return !r.Requested || failedStep(r, req.Step) >= 0 })
	if err != nil {
		return nil, err
	}
	if !r.Requested || r.Skill == nil {
		return nil, events.Errorf(events.CodeConflict, "run %s is not driven by the runner; its agent retries its own steps (a step.started with retry_of naming the failed attempt)", r.ID)
	}
	if r.Status == runstate.StatusCompleted || r.Status == runstate.StatusCancelled {
		return nil, events.Errorf(events.CodeConflict, "run %s is %s", r.ID, r.Status)
	}
	if req.Step != "" {
		if err := knownStep(r, req.Step); err != nil {
			return nil, err
		}
	}
	idx := failedStep(r, req.Step)
	if idx < 0 {
		if req.Step != "" {
			return nil, events.Errorf(events.CodeConflict, "step %q of run %s has not failed", req.Step, r.ID)
		}
		return nil, events.Errorf(events.CodeConflict, "run %s has no failed step to retry", r.ID)
	}
	st, ss := r.Skill.Steps[idx], r.Steps[idx]
	if st.Kind != skill.KindTool {
		return nil, events.Errorf(events.CodeInvalidRequest, "step %q is a %s step; only tool steps take corrected args", st.Name, st.Kind)
	}
	if req.Attempt > 0 && req.Attempt != ss.Attempt {
		return nil, events.Errorf(events.CodeConflict, "step %q of run %s: attempt %d is not its last failure (attempt %d is): retried already", st.Name, r.ID, req.Attempt, ss.Attempt)
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
	if r.Status == runstate.StatusFailed || r.Status == runstate.StatusPaused {
		// A retry is the run's agent's or a person's: the audit says which
		// (the healer learns the correction as the agent's when by is the
		// run's agent, a person's otherwise).
		method := events.MethodUser
		if by := actor(req.By); r.Agent != "" && by == r.Agent {
			method = events.MethodAgent
		}
		res, err := events.NewEvent(events.RunResumed, r.ID, r.ID+"/"+stepSuffix(idx, next, "resumed"), Source, events.RunResumedData{
			Step: st.Name, Index: idx, Method: method, By: actor(req.By), Reason: retryReason(req.Reason),
		})
		if err != nil {
			return nil, err
		}
		evs = append(evs, res)
	}
	start, err := startEvent(r, idx, next, args, ss.FailedID)
	if err != nil {
		return nil, err
	}
	evs = append(evs, *start)
	if err := c.publishRunEvent(ctx, r, evs...); err != nil {
		return nil, err
	}
	return command.RunReply{RunID: r.ID, Status: runstate.StatusRunning}, nil
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
