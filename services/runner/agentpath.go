package runner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// The run commands on an agent's own path (command.AgentPrefix): the same
// commands, with the agent the subject names as the caller. A run started
// there belongs to that agent; the other commands there act only on that
// agent's runs and refuse any other run with code forbidden — a run of
// another agent and a run that does not exist alike, so that the refusal
// says nothing about other agents' runs. A deployment whose agents may
// publish on their own path only (heed deploy permissions
// --isolate-agents) keeps them from reading or steering each other's runs.

func (c *commands) registerAgentPath(ctx context.Context, svc micro.Service) error {
	v := c.e.bus.Codec().Validator()
	dl := c.deadLetters()
	on := func(subject string) micro.EndpointOpt {
		return micro.WithEndpointSubject(command.AsAgent("*", subject))
	}
	for _, ep := range []struct {
		name, subject string
		h             micro.Handler
	}{
		{"agent-start", command.RunStart, command.AgentHandler(ctx, v, command.RunStart, commandTimeout, c.agentStart, dl)},
		{"agent-continue", command.RunContinue, command.AgentHandler(ctx, v, command.RunContinue, commandTimeout, func(ctx context.Context, agent string, req *command.ContinueRun) (any, error) {
			if err := actingAs(agent, command.RunContinue, &req.By); err != nil {
				return nil, err
			}
			return c.asOwner(ctx, agent, req.RunID, func() (any, error) { return retrying(c.continueRun)(ctx, req) })
		}, dl)},
		{"agent-retry", command.RunRetry, command.AgentHandler(ctx, v, command.RunRetry, commandTimeout, func(ctx context.Context, agent string, req *command.RetryStep) (any, error) {
			if err := actingAs(agent, command.RunRetry, &req.By); err != nil {
				return nil, err
			}
			return c.asOwner(ctx, agent, req.RunID, func() (any, error) { return retrying(c.retry)(ctx, req) })
		}, dl)},
		{"agent-cancel", command.RunCancel, command.AgentHandler(ctx, v, command.RunCancel, commandTimeout, func(ctx context.Context, agent string, req *command.CancelRun) (any, error) {
			if err := actingAs(agent, command.RunCancel, &req.By); err != nil {
				return nil, err
			}
			return c.asOwner(ctx, agent, req.RunID, func() (any, error) { return retrying(c.cancel)(ctx, req) })
		}, dl)},
		{"agent-get", command.RunGet, command.AgentHandler(ctx, v, command.RunGet, commandTimeout, func(ctx context.Context, agent string, req *command.GetRun) (any, error) {
			return c.readRun(ctx, req, agent)
		}, dl)},
	} {
		if err := svc.AddEndpoint(ep.name, ep.h, on(ep.subject)); err != nil {
			return err
		}
	}
	return nil
}

// actingAs makes by the agent's name: on its own path an agent acts as
// itself (the subject names it; NATS permissions keep it there), so a by
// naming anyone else is refused rather than recorded.
func actingAs(agent, subject string, by *string) error {
	switch *by {
	case "":
		*by = agent
	case agent:
	default:
		return events.Errorf(events.CodeForbidden, "on %s you act as %s; by %q is someone else", command.AsAgent(agent, subject), agent, *by)
	}
	return nil
}

// agentStart starts a run that belongs to agent.
func (c *commands) agentStart(ctx context.Context, agent string, req *command.StartRun) (any, error) {
	if req.Agent != "" && req.Agent != agent {
		return nil, events.Errorf(events.CodeForbidden, "a run started on %s belongs to %s; the request names agent %q", command.AsAgent(agent, command.RunStart), agent, req.Agent)
	}
	req.Agent = agent
	if req.RequestedBy == "" {
		req.RequestedBy = agent
	}
	return c.startRun(ctx, req, agent)
}

// notAgents is the refusal of a run that is not agent's.
func notAgents(agent, id string) error {
	return events.Errorf(events.CodeForbidden, "run %s is not one of agent %s's runs (or does not exist): an agent acts on its own runs only", id, agent)
}

// asOwner runs f if run id belongs to agent.
func (c *commands) asOwner(ctx context.Context, agent, id string, f func() (any, error)) (any, error) {
	r, err := c.loadRun(ctx, id, nil)
	if events.CodeOf(err) == events.CodeNotFound {
		return nil, notAgents(agent, id)
	}
	if err != nil {
		return nil, err
	}
	if r.Agent != agent {
		return nil, notAgents(agent, id)
	}
	return f()
}

// get reads a run's events for anyone who may call heed.cmd.run.get.
func (c *commands) get(ctx context.Context, req *command.GetRun) (any, error) {
	return c.readRun(ctx, req, "")
}

// readRun reads the run's events after req.After, waiting up to
// req.WaitMS for one when there is none; agent, when set, must own the
// run. The wait listens to the run's subjects and reads again when
// something arrives there, and again at growing intervals after that: a
// subscriber can hear a message before the stream has stored it, and
// nothing may come after it to wake the wait again.
func (c *commands) readRun(ctx context.Context, req *command.GetRun, agent string) (any, error) {
	if !events.ValidID(req.RunID) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid run id", req.RunID)
	}
	wait := min(time.Duration(req.WaitMS)*time.Millisecond, command.MaxRunWait)
	var wake chan *nats.Msg
	if wait > 0 {
		wake = make(chan *nats.Msg, 1)
		sub, err := c.e.bus.JetStream().Conn().ChanSubscribe(events.SubjectFilter("run", req.RunID), wake)
		if err != nil {
			return nil, events.Errorf(events.CodeUnavailable, "follow run %s: %v", req.RunID, err)
		}
		// A slow reader drops what it has no room for: one message is
		// enough to say "read again".
		_ = sub.SetPendingLimits(1, -1)
		defer func() { _ = sub.Unsubscribe() }()
	}
	deadline := time.Now().Add(wait)
	// recheck is how long to wait before reading again without a wake:
	// short after a wake (the event may not be stored yet), then growing
	// to lastRecheck, and every lastRecheck until the deadline (a store
	// can take longer on a cluster).
	const firstRecheck, lastRecheck = 5 * time.Millisecond, 320 * time.Millisecond
	recheck := time.Duration(0)
	for {
		reply, r, err := c.runEvents(ctx, req.RunID, req.After)
		if events.CodeOf(err) == events.CodeNotFound && agent != "" {
			return nil, notAgents(agent, req.RunID)
		}
		if err != nil {
			return nil, err
		}
		if agent != "" && r.Agent != agent {
			return nil, notAgents(agent, req.RunID)
		}
		left := time.Until(deadline)
		if len(reply.Events) > 0 || r.Terminal() || left <= 0 {
			return reply, nil
		}
		if recheck > 0 {
			left = min(left, recheck)
		}
		t := time.NewTimer(left)
		select {
		case <-wake:
			recheck = firstRecheck
		case <-t.C:
			recheck = min(recheck*4, lastRecheck)
		case <-ctx.Done():
			t.Stop()
			return reply, nil
		}
		t.Stop()
	}
}

// runEvents reads run id's whole history: its state, and its events after
// sequence after as the reply.
func (c *commands) runEvents(ctx context.Context, id string, after uint64) (command.RunEvents, *runstate.Run, error) {
	r := runstate.New(id)
	out := command.RunEvents{RunID: id, Events: []command.StoredRaw{}}
	// The reply stops short of NATS' message size (it went unsent, and the
	// caller waited for nothing): the rest comes with the next request.
	size, lastSent := 0, after
	// A message that does not decode was refused by the gate: it is in the
	// dead-letter stream, not among the run's events.
	err := r.CatchUpEach(ctx, c.e.bus, c.e.skills, func(ev *events.Event, seq uint64) error {
		if seq <= after || out.More {
			return nil
		}
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if len(out.Events) > 0 && size+len(b) > command.MaxRunEventsBytes {
			out.More = true
			return nil
		}
		size += len(b)
		lastSent = seq
		out.Events = append(out.Events, command.StoredRaw{Seq: seq, Event: b})
		return nil
	})
	if err != nil {
		return out, nil, err
	}
	if r.LastSeq == 0 {
		return out, nil, events.Errorf(events.CodeNotFound, "no run %q", id)
	}
	out.Status, out.Agent, out.LastSeq = r.Status, r.Agent, max(r.LastSeq, after)
	if out.More {
		out.LastSeq = lastSent // where the next request goes on from
	}
	if out.Status == "" {
		out.Status = runstate.StatusRequested
	}
	return out, r, nil
}
