package escalator

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/escalation"
	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// commandTimeout bounds one escalation command.
const commandTimeout = 10 * time.Second

func (e *escalator) serve(ctx context.Context, rt *service.Runtime) (micro.Service, error) {
	svc, err := micro.AddService(rt.Conn, micro.Config{Name: "heed-escalator-commands", Version: service.Version, Description: "heed escalator commands: request, status, held, outcome"})
	if err != nil {
		return nil, fmt.Errorf("register commands: %w", err)
	}
	v := e.bus.Codec().Validator()
	dl := command.All{command.DeadLetters{Bus: e.bus, Service: "heed-escalator-commands", Log: e.log}, command.Gate(rt.Current)}
	g := svc.AddGroup(events.CommandPrefix + ".escalation")
	for _, ep := range []struct {
		name string
		h    micro.Handler
	}{
		{"request", command.Handler(ctx, v, command.EscalationRequest, commandTimeout, e.request, dl)},
		{"status", command.Handler(ctx, v, command.EscalationStatus, commandTimeout, e.status, dl)},
		{"held", command.Handler(ctx, v, command.EscalationHeld, commandTimeout, e.heldCmd, dl)},
		{"outcome", command.Handler(ctx, v, command.EscalationOutcome, commandTimeout, e.outcome, dl)},
	} {
		if err := g.AddEndpoint(ep.name, ep.h); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("register commands: %w", err)
		}
	}
	return svc, nil
}

// request writes the escalation and decides its route at once; the agent
// is never kept waiting for a person.
func (e *escalator) request(ctx context.Context, req *command.RequestEscalation) (any, error) {
	if problem := confirmation.ValidateEscalation(&req.EscalationRequestedData, []string{ChoiceApprove, ChoiceDeny, ChoiceEscalate}); problem != "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "escalation request: %s", problem)
	}
	data := req.EscalationRequestedData
	data.Requester = actor(data.Requester, data.Session)
	cause := Cause{Request: &data}
	id := req.ID
	if id == "" {
		// A new id: nothing to read (its first write is still guarded by
		// "no earlier event"); a write another escalator's consumer made
		// first makes it read and decide again until it is complete.
		id = "esc-" + strings.ToLower(ulid.Make().String())
		defer e.inflight.start(id)()
		return e.finish(e.processFrom(ctx, id, cause, escalation.New(id)))
	}
	defer e.inflight.start(id)()
	if got, ok := e.routed.get(id); ok {
		// A retry of a request this process routed (its caller timed out
		// or asked again): read, not decided again, which could cost a
		// presence ask (up to PresenceTimeout) before the guard told. At
		// least as far as it got here: a direct get on a replicated stream
		// may be answered by a replica behind the log.
		st, err := readAtLeast(ctx, got, func() (*command.EscalationState, error) { return e.load(ctx, id) })
		if err != nil {
			return nil, err
		}
		return e.existingFrom(ctx, id, data, cause, st)
	}
	// A request naming its id is most often new too: it is decided as
	// new and its events written in one batch, guarded by "no earlier
	// event". Only when the log has the id already (a retry, or another
	// request with this id) is it read and compared.
	st, err := e.attempt(ctx, id, cause, escalation.New(id))
	if err == nil {
		return e.finish(st, nil)
	}
	if !errors.Is(err, events.ErrStaleRead) {
		return nil, err
	}
	return e.existing(ctx, id, data, cause)
}

// existing answers a request whose id the log has already: the same
// request (a retry) gets the escalation's state, finished if its writes
// stopped short; other content under the id is a conflict.
func (e *escalator) existing(ctx context.Context, id string, data events.EscalationRequestedData, cause Cause) (any, error) {
	st, err := e.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.existingFrom(ctx, id, data, cause, st)
}

// existingFrom is existing with the escalation read.
func (e *escalator) existingFrom(ctx context.Context, id string, data events.EscalationRequestedData, cause Cause, st *command.EscalationState) (any, error) {
	if st.Status != "" && !reflect.DeepEqual(canonical(st.Request), canonical(data)) {
		return nil, events.Errorf(events.CodeConflict, "escalation %s exists with other content (session %s, operation %s)", id, st.Request.Session, st.Request.Operation)
	}
	if st.Status == "" || st.Routed == nil {
		return e.finish(e.processFrom(ctx, id, cause, st))
	}
	// Routed before this call is not every write made (a failover may
	// have stopped the writes after routed): the consumer's copy of the
	// request is left to finish it.
	return reply(st), nil
}

// finish replies with the state processFrom reached: every write the
// request called for is in the log (see escalator.routed).
func (e *escalator) finish(st *command.EscalationState, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	if st.Routed != nil {
		e.routed.add(st.ID, progressOfState(st))
	}
	return reply(st), nil
}

// progressOfState is how far an escalation has got (progressOf), decided
// past everything.
func progressOfState(st *command.EscalationState) int {
	if st.Decided != nil {
		return 1 << 20
	}
	o := escalation.CurrentOffer(st)
	return progressOf(st.Routed != nil, len(st.Escalations), o != nil && o.EscalationCount == len(st.Escalations))
}

// readAtLeastFor bounds how long readAtLeast reads again.
const readAtLeastFor = time.Second

// readAtLeast reads with load until the escalation has got at least to
// progress (a read that comes from a replica behind the log is read
// again), for up to readAtLeastFor; then it takes what it read.
func readAtLeast(ctx context.Context, progress int, load func() (*command.EscalationState, error)) (*command.EscalationState, error) {
	deadline := time.Now().Add(readAtLeastFor)
	for {
		st, err := load()
		if err != nil || progressOfState(st) >= progress || time.Now().After(deadline) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, nil
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// canonical is a request as the log holds it (JSON round trip), so that a
// repeated request compares equal to the stored one.
func canonical(d events.EscalationRequestedData) events.EscalationRequestedData {
	ev, err := events.NewEvent(events.EscalationRequested, "x", "x", Source, d)
	if err != nil {
		return d
	}
	var out events.EscalationRequestedData
	if jsonUnmarshal(ev.Data(), &out) != nil {
		return d
	}
	return out
}

func reply(st *command.EscalationState) command.EscalationReply {
	r := command.EscalationReply{ID: st.ID, Status: st.Status}
	if st.Routed != nil {
		r.Routed = *st.Routed
	}
	if st.Decided != nil {
		r.Safeguards = st.Decided.Safeguards
	}
	if o := escalation.CurrentOffer(st); o != nil && st.Decided == nil {
		r.Offer = &command.EscalationOffer{Tier: o.Tier, ConfirmID: o.ConfirmID, Deadline: o.Deadline}
	}
	return r
}

func (e *escalator) status(ctx context.Context, req *command.EscalationStatusRequest) (any, error) {
	st, err := e.load(ctx, req.ID)
	if err != nil {
		return nil, err
	}
	if st.Status == "" {
		return nil, events.Errorf(events.CodeNotFound, "no escalation %q", req.ID)
	}
	return st, nil
}

func (e *escalator) heldCmd(_ context.Context, req *command.HeldRequest) (any, error) {
	return e.held.query(req.Session), nil
}

func (e *escalator) outcome(ctx context.Context, req *command.ReportOutcome) (any, error) {
	return events.RetryStale(ctx, 5, func() (any, error) {
		st, err := e.load(ctx, req.ID)
		if err != nil {
			return nil, err
		}
		switch {
		case st.Status == "":
			return nil, events.Errorf(events.CodeNotFound, "no escalation %q", req.ID)
		case st.Decided == nil:
			return nil, events.Errorf(events.CodeConflict, "escalation %s is not decided yet: report the outcome after acting on the decision", req.ID)
		case st.Outcome != nil:
			return nil, events.Errorf(events.CodeConflict, "escalation %s has its outcome already (%s by %s)", req.ID, st.Outcome.Outcome, st.Outcome.By)
		}
		data := events.EscalationOutcomeData{Outcome: req.Outcome, Detail: req.Detail, By: actor(req.By, st.Request.Session),
			Operation: st.Request.Operation, Scope: st.Request.Scope, Environment: st.Request.Environment, Decision: st.Decided.Decision}
		ev, err := events.NewEvent(events.EscalationOutcome, req.ID, req.ID+"/outcome", Source, data)
		if err != nil {
			return nil, err
		}
		if _, err := e.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("escalation", req.ID), Seq: st.Seq}); err != nil {
			return nil, err
		}
		return command.OutcomeReply{ID: req.ID, EventID: ev.ID()}, nil
	})
}
