package client

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/escalation"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// follow delivers every stored event on filter from the start of the log
// (after sequence after), in order, until fn returns done or an error, or
// ctx ends. It reads only what JetStream stored, so whatever it saw a
// command will see too.
// fn also gets how many messages on filter are in the log after this one
// already (a run that failed and is being retried is not over).
//
// follow uses an ordered consumer, deleted when it returns: it is for
// long watches over many aggregates (WatchPending). One aggregate is
// followed with followHistory, which leaves nothing on the server.
func (c *Client) follow(ctx context.Context, filter string, after uint64, fn func(seq, later uint64, ev *events.Event) (done bool, err error)) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, InactiveThreshold: 30 * time.Second}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := c.bus.JetStream().OrderedConsumer(ctx, events.EventStream, cfg)
	if err != nil {
		return &events.Error{Code: events.CodeUnavailable, Message: "follow " + filter + ": " + err.Error(), Err: err}
	}
	it, err := cons.Messages()
	if err != nil {
		return &events.Error{Code: events.CodeUnavailable, Message: "follow " + filter + ": " + err.Error(), Err: err}
	}
	defer it.Stop()
	// Delete the consumer at once rather than leave it to expire: every
	// consumer costs the stream on every message stored. In the
	// background: a role without the delete permission (the console's, a
	// bridge's) waits for no refusal, and after the first refusal it does
	// not ask again; its consumers expire when inactive.
	defer func() {
		if info := cons.CachedInfo(); info != nil && !c.denied.noConsumerDelete.Load() {
			go func() {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_ = c.bus.JetStream().DeleteConsumer(dctx, events.EventStream, info.Name)
				cancel()
			}()
		}
	}()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &events.Error{Code: events.CodeUnavailable, Message: "follow " + filter + ": " + err.Error(), Err: err}
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		ev, err := c.bus.Codec().DecodeStored(events.RawMsg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data(), Seq: meta.Sequence.Stream, Stored: meta.Timestamp})
		if err != nil {
			continue // refused by the gate: not part of the aggregate
		}
		done, err := fn(meta.Sequence.Stream, meta.NumPending, ev)
		if err != nil || done {
			return err
		}
	}
}

// FromNow as FollowNew's after: what is stored from the call on.
const FromNow = ^uint64(0)

// FollowNew calls fn for each event stored on filter (any subjects:
// heed.run.*.> for every run) after sequence after (FromNow: after what
// the stream holds now, LastSeq), in log order, until fn returns an error
// or ctx ends. It holds an ordered consumer while it runs, deleted when it
// returns: for long watches across aggregates (one aggregate is followed
// with FollowStored, which leaves nothing on the server).
func (c *Client) FollowNew(ctx context.Context, filter string, after uint64, fn func(seq uint64, ev *events.Event) error) error {
	if after == FromNow {
		// From the stream's last sequence, not "deliver new": an ordered
		// consumer that resets before its first delivery is made again
		// with the same policy, and "new" would skip what came between.
		var err error
		if after, err = c.LastSeq(ctx); err != nil {
			return err
		}
	}
	return c.follow(ctx, filter, after, func(seq, _ uint64, ev *events.Event) (bool, error) {
		return false, fn(seq, ev)
	})
}

// LastSeq is the log's last sequence now: what a follower from here
// (FollowNew) has seen already.
func (c *Client) LastSeq(ctx context.Context) (uint64, error) {
	info, err := c.bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		return 0, &events.Error{Code: events.CodeUnavailable, Message: "the log's last sequence: " + err.Error(), Err: err}
	}
	return info.CachedInfo().State.LastSeq, nil
}

// followHistory is follow for one aggregate's history (filter:
// heed.run.<id>.>), without a consumer: it reads what is stored with
// direct gets (events.ReadHistory), and reads again when something is
// published on filter (a few times: the stream may store it after the
// read), when the connection is back after a reconnect (what was
// published meanwhile was not heard), and otherwise after a while, backing
// off to idleWait (a message published just before the subscription may
// be stored after the first read; a slow subscription can drop one). An
// idle follower (a finished run's page left open) costs a read every
// idleWait, not one a second.
func (c *Client) followHistory(ctx context.Context, filter string, after uint64, fn func(seq, later uint64, ev *events.Event) (done bool, err error)) error {
	wake := make(chan struct{}, 1)
	sub, err := c.nc.Subscribe(filter, func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return &events.Error{Code: events.CodeUnavailable, Message: "follow " + filter + ": " + err.Error(), Err: err}
	}
	defer func() { _ = sub.Unsubscribe() }()
	connected := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(connected)
	const firstWait, idleWait = 5 * time.Millisecond, 30 * time.Second
	wait := firstWait
	type stored struct {
		seq uint64
		ev  *events.Event
	}
	for {
		// The subscription reaches the server before this read (one
		// connection, in order).
		var got []stored
		last, err := events.ReadHistory(ctx, c.bus.JetStream(), events.EventStream, filter, after, func(raw events.RawMsg) error {
			if ev, err := c.bus.Codec().DecodeStored(raw); err == nil {
				got = append(got, stored{raw.Seq, ev})
			} // else refused by the gate: not part of the aggregate
			return nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		after = max(after, last)
		for i, m := range got {
			done, err := fn(m.seq, uint64(len(got)-1-i), m.ev)
			if err != nil || done {
				return err
			}
		}
		if len(got) > 0 {
			wait = firstWait
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-wake:
			// Published, perhaps not yet stored: if this read misses it,
			// the next comes soon after.
			wait = firstWait
		case <-connected:
			// Reconnected: what was published while away was not heard.
			// The read goes out after the subscription again (nats.go
			// sends it under the lock it reports the status in).
			wait = firstWait
		case <-t.C:
			wait = min(4*wait, idleWait)
		}
		t.Stop()
	}
}

// FollowRun calls fn for each event of a run in log order, from its first,
// until fn says done, the run ends (completed, cancelled, abandoned, or failed with
// nothing after it in the log: the ending event is passed to fn), or ctx
// ends. A failure followed by a retry is not the end: a run can be retried
// after it failed.
func (c *Client) FollowRun(ctx context.Context, runID string, fn func(ev *events.Event) (done bool, err error)) error {
	if !events.ValidID(runID) {
		return events.Errorf(events.CodeInvalidRequest, "%q is not a valid run id", runID)
	}
	return c.followRun(ctx, runID, func(_, later uint64, ev *events.Event) (bool, error) {
		done, err := fn(ev)
		if err != nil || done {
			return done, err
		}
		switch events.Type(ev.Type()) {
		case events.RunCompleted, events.RunCancelled, events.RunAbandoned:
			return true, nil
		case events.RunFailed:
			return later == 0, nil
		}
		return false, nil
	})
}

// Outcome is how a run ended.
type Outcome struct {
	RunID  string
	Status string // completed, failed, cancelled, abandoned
	Event  *events.Event
	// Completed, Failed, Cancelled or Abandoned holds the ending event's data.
	Completed *events.RunCompletedData
	Failed    *events.RunFailedData
	Cancelled *events.RunCancelledData
	Abandoned *events.RunAbandonedData
}

// WaitRun waits until the run ends and returns how: completed, cancelled, abandoned,
// or failed as the log stands (a failed run can be resumed by a retry; a
// failure already followed by one is not an end).
func (c *Client) WaitRun(ctx context.Context, runID string) (Outcome, error) {
	out := Outcome{RunID: runID}
	if !events.ValidID(runID) {
		return out, events.Errorf(events.CodeInvalidRequest, "%q is not a valid run id", runID)
	}
	err := c.followRun(ctx, runID, func(_, later uint64, ev *events.Event) (bool, error) {
		var err error
		switch events.Type(ev.Type()) {
		case events.RunCompleted:
			out.Status, out.Completed = "completed", &events.RunCompletedData{}
			err = json.Unmarshal(ev.Data(), out.Completed)
		case events.RunFailed:
			if later > 0 {
				return false, nil // retried after it failed: not over
			}
			out.Status, out.Failed = "failed", &events.RunFailedData{}
			err = json.Unmarshal(ev.Data(), out.Failed)
		case events.RunCancelled:
			out.Status, out.Cancelled = "cancelled", &events.RunCancelledData{}
			err = json.Unmarshal(ev.Data(), out.Cancelled)
		case events.RunAbandoned:
			out.Status, out.Abandoned = "abandoned", &events.RunAbandonedData{}
			err = json.Unmarshal(ev.Data(), out.Abandoned)
		default:
			return false, nil
		}
		out.Event = ev
		return true, err
	})
	return out, err
}

// WaitAnswer waits until a confirmation has the answer that takes effect
// (the first valid one; refused answers are skipped) and returns its state.
func (c *Client) WaitAnswer(ctx context.Context, id string) (*confirmation.State, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid confirmation id", id)
	}
	st := confirmation.New(id)
	err := c.followHistory(ctx, events.SubjectFilter("confirm", id), 0, func(seq, _ uint64, ev *events.Event) (bool, error) {
		if _, err := st.Apply(ev, seq); err != nil {
			return false, err
		}
		return st.Answer != nil, nil
	})
	return st, err
}

// WaitEscalation follows an escalation's events until it is decided
// (heed.escalation.<id>.decided) or ctx ends, and returns its state.
func (c *Client) WaitEscalation(ctx context.Context, id string) (*command.EscalationState, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid escalation id", id)
	}
	st := escalation.New(id)
	err := c.followHistory(ctx, events.SubjectFilter("escalation", id), 0, func(seq, _ uint64, ev *events.Event) (bool, error) {
		if err := escalation.Apply(st, ev, seq); err != nil {
			return false, err
		}
		return st.Decided != nil, nil
	})
	return st, err
}

// Pending is a change to the set of confirmations waiting for an answer.
type Pending struct {
	ID    string
	State *confirmation.State
	// Closed: the confirmation got the answer that took effect (from any
	// channel, a rule, the deadline); State.Answer says which.
	Closed bool
}

// WatchPending delivers the confirmations waiting for an answer: first
// every one open now (oldest first), then each new request as it arrives,
// and a Closed notice when one is answered anywhere. The channel closes
// when ctx ends or the watch fails. It is how a channel (a terminal, a
// desktop notifier, a chat bridge, the console) learns what to offer.
func (c *Client) WatchPending(ctx context.Context) (<-chan Pending, error) {
	// The index is a projection and may lag the log: read it as far as the
	// indexer has acknowledged, then follow the log from there, so that a
	// request the indexer has not applied yet is not missed.
	cons, err := c.bus.JetStream().Consumer(ctx, events.EventStream, readmodel.IndexConsumer)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: "the indexer's consumer (is the indexer running?): " + err.Error(), Err: err}
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: "the indexer's consumer: " + err.Error(), Err: err}
	}
	start := info.AckFloor.Stream
	entries, err := c.Index(ctx, "confirm")
	if err != nil {
		return nil, err
	}
	open := map[string]*confirmation.State{}
	var initial []*confirmation.State
	for _, e := range entries {
		if !e.Open() {
			continue
		}
		st, err := c.Confirmation(ctx, e.ID)
		if err != nil || !st.Open() {
			continue
		}
		open[e.ID] = st
		initial = append(initial, st)
	}
	sort.Slice(initial, func(i, j int) bool { return initial[i].RequestedAt.Before(initial[j].RequestedAt) })
	out := make(chan Pending, 64)
	go func() {
		defer close(out)
		send := func(p Pending) bool {
			select {
			case out <- p:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for _, st := range initial {
			if !send(Pending{ID: st.ID, State: st}) {
				return
			}
		}
		_ = c.follow(ctx, "heed.confirm.>", start, func(seq, _ uint64, ev *events.Event) (bool, error) {
			id := ev.Subject()
			st, tracked := open[id]
			if !tracked {
				if events.Type(ev.Type()) != events.ConfirmRequested {
					return false, nil // about a confirmation closed before the watch
				}
				st = confirmation.New(id)
			}
			if _, err := st.Apply(ev, seq); err != nil {
				return false, nil
			}
			switch {
			case !tracked && st.Open():
				open[id] = st
				return !send(Pending{ID: id, State: st}), nil
			case tracked && !st.Open():
				delete(open, id)
				return !send(Pending{ID: id, State: st, Closed: true}), nil
			}
			return false, nil
		})
	}()
	return out, nil
}

// WaitChangeSet follows a change set until done says it is done (nil:
// until every item has a decision and every confirmed item a result, or it
// expired) and returns its state.
func (c *Client) WaitChangeSet(ctx context.Context, id string, done func(*command.ChangeSetState) bool) (*command.ChangeSetState, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid change set id", id)
	}
	if done == nil {
		done = ChangeSetSettled
	}
	st := changeset.New(id)
	err := c.followHistory(ctx, events.SubjectFilter("changeset", id), 0, func(seq, _ uint64, ev *events.Event) (bool, error) {
		if _, err := changeset.Apply(st, ev, seq); err != nil {
			return false, err
		}
		return changeset.Proposed(st) && done(st), nil
	})
	return st, err
}

// WatchChangeSet calls fn with the set's state as the log holds it: once
// with what is stored now (if the set was proposed), then after every
// change, until fn returns an error or ctx ends. fn's state is its own.
// A view that redraws on what it hears published and reads the set again
// can miss the last change: a message reaches subscribers before the
// stream has stored it, and nothing comes after the last one.
func (c *Client) WatchChangeSet(ctx context.Context, id string, fn func(*command.ChangeSetState) error) error {
	if !events.ValidID(id) {
		return events.Errorf(events.CodeInvalidRequest, "%q is not a valid change set id", id)
	}
	st := changeset.New(id)
	return c.followHistory(ctx, events.SubjectFilter("changeset", id), 0, func(seq, later uint64, ev *events.Event) (bool, error) {
		if _, err := changeset.Apply(st, ev, seq); err != nil {
			return false, err
		}
		if later > 0 || !changeset.Proposed(st) {
			return false, nil // one call for what one read found
		}
		return false, fn(changeset.Clone(st))
	})
}

// ChangeSetSettled says a set is done: expired, or resolved with every
// confirmed item applied or failed.
func ChangeSetSettled(st *command.ChangeSetState) bool {
	if st.Status == events.SetExpired {
		return len(changeset.ToApply(st)) == 0
	}
	return st.Status == events.SetResolved && len(changeset.ToApply(st)) == 0
}

// followRun is followHistory of a run's subjects; for a client acting as
// an agent (Agent), the same through heed.cmd.run.get, one long poll at a
// time (later: the events after this one in the same reply).
func (c *Client) followRun(ctx context.Context, runID string, fn func(seq, later uint64, ev *events.Event) (done bool, err error)) error {
	if c.agent == "" {
		return c.followHistory(ctx, events.SubjectFilter("run", runID), 0, fn)
	}
	var after uint64
	for {
		wait := command.MaxRunWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)-500*time.Millisecond)
		}
		r, err := c.GetRun(ctx, command.GetRun{RunID: runID, After: after, WaitMS: int(max(wait, 0) / time.Millisecond)})
		if err != nil {
			return err
		}
		for i, s := range r.Events {
			var ev events.Event
			if err := json.Unmarshal(s.Event, &ev); err != nil {
				return events.Errorf(events.CodeInternal, "run %s: event at %d is not a CloudEvent: %v", runID, s.Seq, err)
			}
			later := uint64(len(r.Events) - 1 - i)
			if r.More {
				later++ // more pages follow: this page's last is not the run's
			}
			done, err := fn(s.Seq, later, &ev)
			if err != nil || done {
				return err
			}
		}
		after = max(after, r.LastSeq)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// FollowStored calls fn for each event stored on filter (one aggregate's
// subjects, events.SubjectFilter) after sequence after, in log order, as
// the log stores them, until fn returns an error or ctx ends. A reader
// told of a change by fn reads it back: fn is called once the event is
// stored, never on the publish alone.
func (c *Client) FollowStored(ctx context.Context, filter string, after uint64, fn func(seq uint64, ev *events.Event) error) error {
	return c.followHistory(ctx, filter, after, func(seq, _ uint64, ev *events.Event) (bool, error) {
		return false, fn(seq, ev)
	})
}

// IndexChange is one change of an index entry (WatchIndex): a put, or a
// deletion (Entry empty then).
type IndexChange struct {
	Key     string
	Entry   readmodel.IndexEntry
	Deleted bool
}

// WatchIndex returns the changes of the index entries of one kind (run,
// confirm, pref, fix) made from the call on, once the watch is in place;
// the channel closes when ctx ends or the watch is lost. The index is a
// projection behind the log: a reader of Index told of a change sees it.
func (c *Client) WatchIndex(ctx context.Context, kind string) (<-chan IndexChange, error) {
	kv, err := c.bus.JetStream().KeyValue(ctx, readmodel.IndexBucket)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("index bucket (is the indexer running?): %v", err), Err: err}
	}
	w, err := kv.Watch(ctx, kind+".>", jetstream.UpdatesOnly())
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: "watch the index: " + err.Error(), Err: err}
	}
	out := make(chan IndexChange, 64)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			var u jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				return
			case u, ok = <-w.Updates():
			}
			if !ok {
				return
			}
			if u == nil {
				continue // the end of the initial values (none: updates only)
			}
			ch := IndexChange{Key: u.Key(), Deleted: u.Operation() != jetstream.KeyValuePut}
			if !ch.Deleted && !readmodel.Decode(u.Value(), &ch.Entry) {
				continue
			}
			select {
			case out <- ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
