package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go/jetstream"
)

// The sweep: no run waits for nothing. The runner acts when an event of a
// run is delivered; a delivery can be lost in ways redelivery does not
// cover (the server restarted while a result was being written and a
// duplicate of the delivery was acknowledged, a process died after the
// server gave up on it). So, every SweepEvery, the runner reads again each
// run it drives that has been quiet for SweepQuiet — the runs it has seen,
// and at start every run the index says is not over — and reconciles it
// from the log:
//
//   - what reconciling would write (the next step, a pause, the end, an
//     answer that arrived) is written, guarded by the run's last sequence,
//     so a run that moved on meanwhile is left alone;
//   - a tool call whose result is not in the log and that no call in this
//     process is making: of an idempotent tool, made again with the same
//     idempotency key once an ack wait has passed since it started (its
//     delivery, had it come back, would have made it by then); of a tool
//     that does not honour keys, which a person allowed to be called again,
//     failed with kind "lost" once its time limit (plus SweepQuiet) has
//     passed: its on_error applies;
//   - a retry waiting out its backoff is started.
//
// Everything the sweep writes has the id reconciling would give it, and
// every write is conditional on the log, so several runners sweeping the
// same run write it once.

// sweepLoop runs the sweep until ctx ends.
func (e *engine) sweepLoop(ctx context.Context, every, quiet time.Duration) {
	first := true
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if e.current != nil && e.current() != nil {
			t.Reset(every)
			continue
		}
		e.trimFinished(time.Now())
		n, err := e.sweep(ctx, quiet, first)
		if err != nil && ctx.Err() == nil {
			e.log.Warn("sweep failed; will try again", "err", err)
		} else {
			first = false
			if n > 0 {
				e.log.Info("sweep moved quiet runs on", "runs", n)
			}
		}
		t.Reset(every)
	}
}

// sweep reconciles the quiet runs once and returns how many it moved on.
// With fromIndex it also reads the index for runs not yet seen.
func (e *engine) sweep(ctx context.Context, quiet time.Duration, fromIndex bool) (int, error) {
	// The cached and parked runs are the ones not over (an ended run moves
	// to the finished ones); their states belong to the workers, so only
	// the ids are taken here and each run is read again from the log.
	// Runs handled within quiet are left out unread: with 10,000 runs
	// waiting, reading each every SweepEvery was most of the runner's CPU
	// at rest and kept every block of the log in the server's cache.
	ids := e.drivenIDs(time.Now().Add(-quiet))
	if fromIndex {
		if err := e.activeFromIndex(ctx, ids); err != nil {
			return 0, err
		}
	}
	// A run this process saw pause for confirmation cid: sweepRun leaves
	// a paused run alone until an answer is in the log, and the runner's
	// events after a pause follow the answer (what else comes, a cancel,
	// ends the run, and the sweep writes nothing to an ended run). So
	// whether an answer is in the log stands for reading the run's history
	// and the confirmation's, and one direct get of the last message of up
	// to 256 answer subjects asks it for 256 runs at once: with 10,000
	// runs waiting, a sweep is 40 small reads, not 10,000.
	var waiting []string
	for _, cid := range ids {
		if cid != "" && events.ValidID(cid) {
			waiting = append(waiting, cid)
		}
	}
	answered, err := e.answered(ctx, waiting)
	if err != nil {
		return 0, err
	}
	moved := 0
	for id, cid := range ids {
		if ctx.Err() != nil {
			return moved, ctx.Err()
		}
		if cid != "" && events.ValidID(cid) && !answered[cid] {
			continue
		}
		ok, err := e.sweepRun(ctx, id, quiet)
		if err != nil {
			e.log.Warn("sweep of a run failed", "run", id, "err", err)
			continue
		}
		if ok {
			moved++
		}
	}
	return moved, nil
}

// answered reports which of the confirmations have an answer in the log,
// asking for the last message of their answer subjects (events.LastOfEach:
// 256 subjects a request).
func (e *engine) answered(ctx context.Context, cids []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(cids) == 0 {
		return out, nil
	}
	subjects := make([]string, len(cids))
	for i, cid := range cids {
		subjects[i] = events.ConfirmAnswered.Subject(cid)
	}
	msgs, err := events.LastOfEach(ctx, e.bus.JetStream(), events.EventStream, subjects)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if cid, ok := strings.CutSuffix(strings.TrimPrefix(m.Subject, events.Prefix+".confirm."), ".answered"); ok {
			out[cid] = true
		}
	}
	return out, nil
}

// activeFromIndex adds the runs the index says are not over and this
// process has never seen: those a runner that started (or took over
// another's runs) does not know of. A run it knows is in ids already when
// it is quiet; one it handled within the quiet period, or saw end, is not
// to be read (the first sweep of a busy runner read every run it had just
// opened, a full history read each: seconds of the server's CPU in the
// middle of its work).
func (e *engine) activeFromIndex(ctx context.Context, ids map[string]string) error {
	kv, err := e.bus.JetStream().KeyValue(ctx, readmodel.IndexBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil // no indexer yet: nothing indexed to look at
	}
	if err != nil {
		return err
	}
	return events.ScanBucket(ctx, kv, "run.>", func(_ string, value []byte) error {
		var x readmodel.IndexEntry
		if !readmodel.Decode(value, &x) {
			return nil
		}
		switch x.Status {
		case "requested", "running", "paused":
			if _, ok := ids[x.ID]; !ok && x.Driver != "agent" && !e.knows(x.ID) {
				ids[x.ID] = ""
			}
		}
		return nil
	})
}

// sweepRun reconciles one run if it has been quiet long enough.
func (e *engine) sweepRun(ctx context.Context, id string, quiet time.Duration) (bool, error) {
	r, err := runstate.Load(ctx, e.bus, id, e.skills)
	if err != nil {
		return false, err
	}
	if !r.Requested || r.Terminal() || r.Skill == nil || time.Since(r.LastAt) < quiet {
		return false, nil
	}
	// An answer to its confirmation is not in the run's log: bring it in.
	if r.Paused != nil && r.Paused.ConfirmID != "" {
		st, err := confirmation.LoadVerdicts(ctx, e.bus, r.Paused.ConfirmID)
		if err != nil && events.CodeOf(err) != events.CodeNotFound {
			return false, err
		}
		if st == nil || st.Answer == nil {
			return false, nil // still waiting for someone: not stuck
		}
		if i := r.Paused.Index; i >= 0 && i < len(r.Steps) && r.Steps[i].ConfirmID == st.ID {
			if why := foreignRequest(r, i, st); why != "" {
				return true, e.failTaken(ctx, r, i, st.ID, why)
			}
		}
		ans, err := events.NewEvent(events.ConfirmAnswered, st.ID, st.AnswerID, Source, st.Answer)
		if err != nil {
			return false, err
		}
		if err := r.Apply(&ans, 0, e.skills); err != nil {
			return false, err
		}
	}
	cause, err := events.NewEvent(events.RunWarning, id, r.LastID, Source, nil) // stands for the run's last event
	if err != nil {
		return false, err
	}
	unbacked, err := e.unbackedResumes(ctx, r)
	if err != nil {
		return false, err
	}
	dec := e.decide(r, &cause, unbacked)
	limit := e.ackWait
	if l := dec.Launch; l != nil && l.Start == nil && len(dec.Events) == 0 {
		spec, ok := e.invoker.Registry.Get(l.Step.Tool)
		if ok && spec.IsIdempotent() {
			// A call started and not running here, of a tool that honours
			// its idempotency key: made again with the same key, exactly
			// once for the tool, whatever became of the first (a runner
			// killed while making it, its result lost in a failover, its
			// delivery given up while runners came and went). It waits
			// one ack wait after the start: the delivery that started it
			// comes back to this runner by then and makes it, held. A
			// call never fails as lost: it ends by its result, or by the
			// tool's own time limit.
			if time.Since(r.Steps[l.Index].StartedAt) < e.ackWait+quiet {
				return false, nil
			}
			if !e.launch(e.callCtx, nil, r.ID, l) {
				return false, nil // its delivery came back meanwhile and made it
			}
			e.log.Info("sweep makes a call again with its idempotency key (its result is not in the log and no call here is making it)",
				"run", id, "step", l.Step.Name, "attempt", l.Attempt, "key", tool.IdempotencyKey(r.ID, l.Index, l.Attempt))
			return true, nil
		}
		if ok {
			limit = spec.TimeoutDuration()
		}
	}
	out := sweepEvents(r, dec, time.Now().UTC(), limit+quiet)
	if len(out) == 0 {
		return false, nil
	}
	for i := range out {
		out[i].SetExtension("causationid", r.LastID)
	}
	if err := e.publishGuarded(ctx, r, out); err != nil {
		if errors.Is(err, events.ErrStaleRead) {
			return false, nil // the run moved on meanwhile
		}
		return false, err
	}
	e.forget(id) // the cached state is behind the log now
	e.log.Info("sweep moved a quiet run on", "run", id, "events", eventTypes(out))
	return true, nil
}

// publishGuarded writes events to a run only if nothing was appended to it
// since it was read: its first event of the run carries the expectation
// (an event of another aggregate, a confirmation request, is guarded by
// its deterministic id).
func (e *engine) publishGuarded(ctx context.Context, r *runstate.Run, out []events.Event) error {
	guarded := false
	for i := range out {
		var opts []events.PublishOption
		if !guarded && events.Type(out[i].Type()).Kind() == "run" {
			opts, guarded = append(opts, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("run", r.ID), Seq: r.LastSeq}), true
		}
		if _, err := e.bus.Publish(ctx, &out[i], opts...); err != nil {
			return err
		}
	}
	return nil
}

func eventTypes(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i := range evs {
		out[i] = evs[i].Type()
	}
	return out
}

// sweepEvents is what a sweep writes to a quiet run, given the decision
// its state leads to: the decision's events; a retry's start, when the
// process that waited out its backoff is gone; or, for a call that has
// been running longer than it may (callLimit), a failure of kind "lost".
func sweepEvents(r *runstate.Run, dec Decision, now time.Time, callLimit time.Duration) []events.Event {
	switch {
	case len(dec.Events) > 0:
		return dec.Events
	case dec.Launch != nil && dec.Launch.Start != nil:
		return []events.Event{*dec.Launch.Start}
	case dec.Launch != nil:
		l, ss := dec.Launch, r.Steps[dec.Launch.Index]
		if now.Sub(ss.StartedAt) < callLimit {
			return nil // the call may still be running somewhere
		}
		failed, err := events.NewEvent(events.RunStepFailed, r.ID, r.ID+"/"+stepSuffix(l.Index, l.Attempt, "failed"), Source, events.StepFailedData{
			Step: l.Step.Name, Index: l.Index, Attempt: l.Attempt, Tool: l.Step.Tool, Args: ss.Args,
			Error: events.ErrorInfo{Kind: "lost", Message: fmt.Sprintf("the result of this call was never recorded (the runner or NATS restarted while it ran); it may or may not have taken effect: idempotency key %s", tool.IdempotencyKey(r.ID, l.Index, l.Attempt))},
		})
		if err != nil {
			return nil
		}
		failed.SetTime(now)
		return []events.Event{failed}
	}
	return nil
}

// Abandoned runs: a run with no event for AbandonAfter — whoever drives
// it, an outside agent that went quiet included — ends with
// heed.run.abandoned, so no run stays active forever and what the learner
// keeps for a run's open calls is let go. The event has the id
// <run>/abandoned and is written only if the run's last sequence is still
// the one the decision was made on: an event that arrives meanwhile wins
// cleanly, and the run is judged again later. Events after it are kept in
// the log, as after a completed or cancelled run, and change nothing: the
// run's status stays abandoned and the runner does not act on it.

// abandonEvery is how often the runner looks for abandoned runs: a tenth of
// the idle time, between the sweep's period and an hour.
func abandonEvery(sweepEvery, idle time.Duration) time.Duration {
	return min(max(idle/10, sweepEvery), time.Hour)
}

// abandonLoop ends idle runs until ctx ends.
func (e *engine) abandonLoop(ctx context.Context, every, idle time.Duration) {
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if e.current != nil && e.current() != nil {
			t.Reset(every)
			continue
		}
		n, err := e.abandonIdle(ctx, idle)
		if err != nil && ctx.Err() == nil {
			e.log.Warn("looking for abandoned runs failed; will try again", "err", err)
		}
		if n > 0 {
			e.log.Info("abandoned idle runs", "runs", n, "idle", idle)
		}
		t.Reset(every)
	}
}

// abandonIdle ends every run that has been idle for idle: the runs the
// index says are not over and whose last event is that old, and the runs
// this runner has cached. Each is read again from the log and decided on
// (abandonEvent).
func (e *engine) abandonIdle(ctx context.Context, idle time.Duration) (int, error) {
	ids := e.drivenIDs(time.Now().Add(-idle))
	now := time.Now().UTC()
	kv, err := e.bus.JetStream().KeyValue(ctx, readmodel.IndexBucket)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return 0, err
	}
	if kv != nil {
		err := events.ScanBucket(ctx, kv, "run.>", func(_ string, value []byte) error {
			var x readmodel.IndexEntry
			if readmodel.Decode(value, &x) && !x.Terminal() && now.Sub(x.Last.Time) >= idle {
				ids[x.ID] = ""
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	n := 0
	for id := range ids {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		r, err := runstate.Load(ctx, e.bus, id, e.skills)
		if err != nil {
			e.log.Warn("reading a run to judge it idle failed", "run", id, "err", err)
			continue
		}
		ev := abandonEvent(r, time.Now().UTC(), idle)
		if ev == nil {
			continue
		}
		if err := e.publishGuarded(ctx, r, []events.Event{*ev}); err != nil {
			if !errors.Is(err, events.ErrStaleRead) {
				e.log.Warn("abandoning an idle run failed", "run", id, "err", err)
			}
			continue // an event arrived meanwhile: the run is not idle
		}
		e.forget(id)
		e.log.Info("run abandoned", "run", id, "last_event", r.LastID, "last_at", r.LastAt)
		n++
	}
	return n, nil
}

// abandonEvent is the decision: the heed.run.abandoned that a run idle
// since its last event (at r.LastAt) gets at now, or nil. Runs that are
// over (a failed run included: it waits for a retry, not for time) and
// runs with no stored event are left alone.
func abandonEvent(r *runstate.Run, now time.Time, idle time.Duration) *events.Event {
	if idle <= 0 || r.LastSeq == 0 || r.LastAt.IsZero() || r.Terminal() {
		return nil
	}
	quiet := now.Sub(r.LastAt)
	if quiet < idle {
		return nil
	}
	ev, err := events.NewEvent(events.RunAbandoned, r.ID, r.ID+"/abandoned", Source, events.RunAbandonedData{
		Reason:      fmt.Sprintf("no event for %s, longer than the runner's idle limit (%s); the last was %s", quiet.Truncate(time.Second), idle, r.LastID),
		LastEventID: r.LastID,
		LastEventAt: r.LastAt.UTC(),
		IdleMS:      float64(quiet.Milliseconds()),
	})
	if err != nil {
		return nil
	}
	ev.SetTime(now)
	ev.SetExtension("causationid", r.LastID)
	return &ev
}
