package runner

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/tool"
)

// ChangeSetConsumerName is the runner's durable of change-set decisions:
// confirmed items are applied here, with the runner's tools.
const ChangeSetConsumerName = "runner-changesets"

// applier applies the confirmed items of change sets (docs/CHANGESETS.md).
// Each decided event of a set makes it read the set from the log and
// apply every confirmed item that has no result yet, in item order:
// heed.changeset.apply.started (a fixed id per item and attempt), the
// tool's check if it has one (a failing check is a stale item: not
// applied, and the person is told why), the tool with the idempotency key
// changeset/<set-id>/<item>, then apply.completed or apply.failed. The
// delivery stays unacknowledged (with heartbeats) until every result is in
// the log, so a runner killed during a call has the delivery come back to
// a runner that calls again with the same key; a tool that does not honour
// keys (idempotent: false) is not called again, and the item fails as
// lost instead.
type applier struct {
	// sets are the sets this runner read last, as of their Seq: the next
	// read of one asks the log only for what came after (changeset.Refresh).
	sets    *changeset.Cache
	bus     *events.Bus
	invoker *tool.Invoker
	ackWait time.Duration
	log     *slog.Logger
}

func (a *applier) routes() *events.Routes {
	r := events.NewRoutes()
	events.On(r, events.ChangeSetDecided, func(ctx context.Context, d *events.Delivery, _ *events.ChangeSetDecidedData) ([]events.Event, error) {
		return nil, a.applySet(ctx, d, d.Event.Subject())
	})
	return r
}

// applySet applies what the set has confirmed and not applied. Items are
// applied one at a time: the next item's check sees what the previous one
// changed.
func (a *applier) applySet(ctx context.Context, d *events.Delivery, id string) error {
	stop := a.heartbeat(d)
	defer stop()
	for {
		st := a.sets.Get(id)
		if st == nil {
			st = changeset.New(id)
		}
		if err := changeset.Refresh(ctx, a.bus, st); err != nil {
			a.sets.Drop(id)
			return err
		}
		if !changeset.Proposed(st) {
			return nil // decisions without a proposal decide nothing
		}
		a.sets.Put(st)
		todo := changeset.ToApply(st)
		if len(todo) == 0 {
			return nil
		}
		for _, n := range todo {
			if err := a.applyItem(ctx, st, changeset.Item(st, n)); err != nil {
				return err
			}
		}
	}
}

// heartbeat keeps the delivery while items are applied.
func (a *applier) heartbeat(d *events.Delivery) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(max(a.ackWait/3, 50*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = d.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

func (a *applier) applyItem(ctx context.Context, st *command.ChangeSetState, it *command.ChangeItemState) error {
	attempt := max(it.Attempts, 1)
	key := events.ChangeIdempotencyKey(st.ID, it.Item)
	prefix := fmt.Sprintf("%s/%d/apply/%d", st.ID, it.Item, attempt)
	spec, known := a.invoker.Registry.Get(it.Tool)
	start := time.Now()
	fail := func(info events.ErrorInfo, stale bool) error {
		info.Message, info.Truncated = truncateString(info.Message, maxFieldBytes)
		return a.write(ctx, st, events.ChangeApplyFailed, prefix+"/failed", events.ChangeApplyFailedData{Item: it.Item, Attempt: attempt, Error: info, Stale: stale, DurationMS: ms(time.Since(start))})
	}
	if it.Apply == events.ApplyApplying && known && !spec.IsIdempotent() {
		// Started before a crash, result unknown, and the tool cannot be
		// asked twice safely.
		return fail(events.ErrorInfo{Kind: "lost", Message: fmt.Sprintf("the result of applying this item was never recorded (heed restarted during the call); %s does not honour idempotency keys, so it was not called again: check whether it took effect", it.Tool)}, false)
	}
	if it.Apply != events.ApplyApplying {
		args, trunc := truncateMap(it.Args, maxFieldBytes)
		if err := a.write(ctx, st, events.ChangeApplyStarted, prefix+"/started", events.ChangeApplyStartedData{Item: it.Item, Tool: it.Tool, Args: args, ArgsTruncated: trunc, IdempotencyKey: key, Attempt: attempt}); err != nil {
			return err
		}
	}
	if !known {
		return fail(events.ErrorInfo{Kind: "not_found", Message: fmt.Sprintf("unknown tool %q (not in the runner's tools file)", it.Tool)}, false)
	}
	if spec.Check != "" && len(it.Before) > 0 { // nothing to compare with otherwise
		args := maps.Clone(it.Args)
		if args == nil {
			args = map[string]any{}
		}
		args["before"] = it.Before
		res := a.invoker.Invoke(ctx, tool.Call{Tool: spec.Check, Args: args, RunID: st.ID, Step: "item-" + strconv.Itoa(it.Item), Attempt: attempt, IdempotencyKey: key + "/check"})
		if res.Err != nil {
			if ctx.Err() != nil {
				return ctx.Err() // draining: the next runner applies it
			}
			a.log.Info("change item is stale; not applied", "changeset", st.ID, "item", it.Item, "tool", it.Tool, "check", spec.Check, "reason", res.Err.Message)
			return fail(events.ErrorInfo{Kind: "stale", Message: fmt.Sprintf("%s (checked by %s)", strings.TrimSpace(res.Err.Message), spec.Check)}, true)
		}
	}
	res := a.invoker.Invoke(ctx, tool.Call{Tool: it.Tool, Args: it.Args, RunID: st.ID, Step: "item-" + strconv.Itoa(it.Item), Attempt: attempt, IdempotencyKey: key})
	if res.Err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fail(events.ErrorInfo{Kind: res.Err.Kind, Message: res.Err.Message, ExitCode: res.Err.ExitCode}, false)
	}
	out, trunc := truncateValue(res.Output, maxFieldBytes)
	return a.write(ctx, st, events.ChangeApplyCompleted, prefix+"/completed", events.ChangeApplyCompletedData{Item: it.Item, Attempt: attempt, Output: out, OutputTruncated: trunc, DurationMS: ms(res.Duration)})
}

// write appends one event of the set (its id fixed, so a repeat after a
// crash is dropped) and folds it.
func (a *applier) write(ctx context.Context, st *command.ChangeSetState, t events.Type, id string, data any) error {
	ev, err := events.NewEvent(t, st.ID, id, Source, data)
	if err != nil {
		return err
	}
	ack, err := a.bus.Publish(ctx, &ev)
	if err != nil {
		return err
	}
	if ack.Duplicate {
		// Written before (a crash, another runner): what the log holds
		// stands; read it again rather than folding this copy.
		a.sets.Drop(st.ID)
		return nil
	}
	// The set's read position moves past our own write only if nothing
	// else came between (ack.Sequence is next): otherwise the next read
	// starts from the old position and sees both.
	if ack.Sequence == st.Seq+1 {
		_, err = changeset.Apply(st, &ev, ack.Sequence)
		a.sets.Put(st)
		return err
	}
	_, err = changeset.Apply(st, &ev, 0)
	return err
}
