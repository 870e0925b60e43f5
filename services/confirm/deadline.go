package confirm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// consumeDeadlines turns fired deadlines into heed.confirm.expired events.
// A fired deadline is a plain message the server stored on
// heed.schedule.fired.confirm.<id>; the router writes the expired event
// with a deterministic id (JetStream drops a repeat) and the time the
// deadline fired, but only while the confirmation is still open: a
// deadline that fires after an answer (one published straight to the log,
// which cannot cancel the schedule in the same write) changes nothing.
//
// If the durable is deleted (`nats consumer rm`) it is made again, like
// every events.Consume durable, delivering from the first sequence this
// process has not acknowledged: nothing is skipped, and a fired deadline
// handled twice changes nothing.
func (r *router) consumeDeadlines(ctx context.Context) (*deadlineConsumer, error) {
	d := &deadlineConsumer{r: r, inflight: map[uint64]int{}, lost: make(chan struct{}, 1), work: make(chan jetstream.Msg, deadlineWorkers)}
	// Made while JetStream cannot answer for a moment (a cluster electing
	// the stream's leader after a node was lost), as every events.Consume
	// durable is: a router starting then waits instead of exiting.
	var cons jetstream.Consumer
	err := events.WhileUnavailable(ctx, func() error {
		var err error
		cons, err = r.bus.JetStream().CreateOrUpdateConsumer(ctx, events.EventStream, d.config(0))
		if err != nil {
			// A durable recreated after a loss starts at a sequence, and a
			// deliver policy cannot be updated: keep it.
			if old, oerr := r.bus.JetStream().Consumer(ctx, events.EventStream, DeadlineConsumerName); oerr == nil && old.CachedInfo().Config.DeliverPolicy == jetstream.DeliverByStartSequencePolicy {
				cons, err = r.bus.JetStream().CreateOrUpdateConsumer(ctx, events.EventStream, d.config(old.CachedInfo().Config.OptStartSeq))
			}
		}
		return err
	})
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("create consumer %s: %v", DeadlineConsumerName, err), Err: err}
	}
	// Deadlines of different confirmations are independent: a burst of
	// them (10,000 falling at once) is worked off by several workers.
	for range deadlineWorkers {
		go func() {
			for m := range d.work {
				if err := r.fired(ctx, m); err != nil {
					r.log.Warn("deadline not handled; will retry", "subject", m.Subject(), "err", err)
					_ = m.NakWithDelay(time.Second)
					continue
				}
				if m.Ack() == nil {
					d.acked(m)
				}
			}
		}()
	}
	if d.cc, err = d.start(cons); err != nil {
		close(d.work)
		return nil, err
	}
	go d.supervise(ctx)
	return d, nil
}

// deadlineConsumer is the router's durable of fired deadlines.
type deadlineConsumer struct {
	r    *router
	work chan jetstream.Msg
	lost chan struct{}

	mu       sync.Mutex
	cc       jetstream.ConsumeContext
	stopped  bool
	inflight map[uint64]int // received, not yet acknowledged, by stream sequence
	maxSeen  uint64         // the highest sequence received
}

func (d *deadlineConsumer) config(startSeq uint64) jetstream.ConsumerConfig {
	c := jetstream.ConsumerConfig{
		Durable:       DeadlineConsumerName,
		Description:   "confirm router: fired confirmation deadlines become heed.confirm.expired",
		FilterSubject: confirmation.FiredSubject("*"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1000,
	}
	if startSeq > 0 {
		c.DeliverPolicy, c.OptStartSeq = jetstream.DeliverByStartSequencePolicy, startSeq
	}
	return c
}

func (d *deadlineConsumer) start(cons jetstream.Consumer) (jetstream.ConsumeContext, error) {
	return cons.Consume(func(m jetstream.Msg) {
		if meta, err := m.Metadata(); err == nil {
			d.mu.Lock()
			d.inflight[meta.Sequence.Stream]++
			d.maxSeen = max(d.maxSeen, meta.Sequence.Stream)
			d.mu.Unlock()
		}
		d.work <- m
	}, jetstream.PullHeartbeat(time.Second), jetstream.PullExpiry(events.PullExpiry), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			select {
			case d.lost <- struct{}{}:
			default:
			}
		}
	}))
}

func (d *deadlineConsumer) acked(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	d.mu.Lock()
	delete(d.inflight, meta.Sequence.Stream)
	d.mu.Unlock()
}

// next is the first sequence not known to be acknowledged.
func (d *deadlineConsumer) next() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	from := d.maxSeen + 1
	for seq := range d.inflight {
		from = min(from, seq)
	}
	return from
}

// supervise recreates the durable when it is deleted.
func (d *deadlineConsumer) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.lost:
		}
		// As events.Consume does: let the server finish removing it first.
		select {
		case <-ctx.Done():
			return
		case <-time.After(events.RecreateDelay):
		}
		for attempt := 1; ; attempt++ {
			err := d.recreate(ctx)
			if err == nil {
				break
			}
			d.r.log.Warn("recreating the deadline durable failed; will retry", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(time.Duration(attempt)*250*time.Millisecond, 5*time.Second)):
			}
		}
	}
}

func (d *deadlineConsumer) recreate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	js := d.r.bus.JetStream()
	cons, err := js.Consumer(ctx, events.EventStream, DeadlineConsumerName)
	from := d.next()
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = js.CreateConsumer(ctx, events.EventStream, d.config(from))
	}
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return nil
	}
	cc, err := d.start(cons)
	if err != nil {
		return err
	}
	d.cc.Stop()
	d.cc = cc
	d.r.log.Warn("deadline durable was gone; recreated", "from_seq", from)
	return nil
}

// Drain stops fetching; the workers end once the last deliveries are
// handed over.
func (d *deadlineConsumer) Drain() {
	d.mu.Lock()
	d.stopped = true
	cc := d.cc
	d.mu.Unlock()
	cc.Drain()
	go func() { <-cc.Closed(); close(d.work) }()
}

// deadlineWorkers handle fired deadlines at once.
const deadlineWorkers = 32

// fired handles one fired deadline.
func (r *router) fired(ctx context.Context, m jetstream.Msg) error {
	var body deadlineBody
	if err := json.Unmarshal(m.Data(), &body); err != nil || !events.ValidID(body.ConfirmID) || m.Subject() != confirmation.FiredSubject(body.ConfirmID) {
		r.log.Warn("ignoring a message that is not a heed deadline", "subject", m.Subject())
		return nil
	}
	meta, err := m.Metadata()
	if err != nil {
		return err
	}
	id := body.ConfirmID
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	attempt := 0
	_, err = events.RetryStale(ctx, 5, func() (struct{}, error) {
		attempt++
		// First from what the answers consumer holds (a burst of deadlines
		// must not read the log once each); if that is stale the write
		// fails as stale, and the log is read.
		v, cached := r.gates.view(id)
		if attempt == 1 && !cached {
			// Most deadlines fire on a question nobody answered: then its
			// request is its only event, and two reads from the subject
			// index say so (a burst of 10,000 must not read each history).
			v, cached = r.unansweredView(ctx, id)
		}
		if attempt > 1 || !cached {
			st, err := confirmation.Load(ctx, r.bus, id)
			if err != nil {
				if events.CodeOf(err) == events.CodeNotFound {
					r.m.DeadlineFired(false)
					return struct{}{}, nil
				}
				return struct{}{}, err
			}
			v = viewOf(st)
		}
		if !v.open || v.expired {
			r.m.DeadlineFired(false)
			return struct{}{}, nil
		}
		if !v.requestedAt.IsZero() {
			// Only the stream's scheduler should publish here, at the
			// deadline; any client may (or a configuration with longer
			// timeouts scheduled it): one that fired before the request's
			// deadline is scheduled again for it, and expires nothing.
			if due := r.cfg.Deadline(v.requestedAt, v.timeoutS); meta.Timestamp.Before(due.Add(-earlyFireSlack)) {
				r.log.Warn("a deadline fired before its time (published by a client, or scheduled under shorter timeouts): scheduled again", "confirm", id, "fired_at", meta.Timestamp.UTC(), "due", due.UTC())
				r.m.DeadlineFired(false)
				return struct{}{}, r.reschedule(ctx, id, v, due, meta.Sequence.Stream)
			}
		}
		exp, err := events.NewEvent(events.ConfirmExpired, id, id+"/expired", Source, events.ConfirmExpiredData{Deadline: body.Deadline, Default: v.dflt, RunID: v.runID})
		if err != nil {
			return struct{}{}, err
		}
		exp.SetTime(meta.Timestamp.UTC()) // when it fired
		if _, err := r.bus.Publish(ctx, &exp, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: v.lastSeq}); err != nil {
			return struct{}{}, err
		}
		r.m.DeadlineFired(true)
		r.log.Info("deadline reached", "confirm", id, "deadline", body.Deadline)
		return struct{}{}, nil
	})
	return err
}

// earlyFireSlack is how much before a request's deadline a fired deadline
// may be stored and still count (clocks, the scheduler's rounding).
const earlyFireSlack = time.Second

// reschedule schedules a confirmation's deadline again for due, after a
// deadline fired before its time (firedSeq: that message, which names the
// new schedule's message id, so it is written once).
func (r *router) reschedule(ctx context.Context, id string, v deadlineView, due time.Time, firedSeq uint64) error {
	body, err := json.Marshal(deadlineBody{ConfirmID: id, Deadline: due.UTC(), Default: v.dflt, RunID: v.runID})
	if err != nil {
		return err
	}
	header := nats.Header{HeaderSchedule: {scheduleKind}, events.HeaderMsgID: {fmt.Sprintf("sched:%s:again:%d", id, firedSeq)}, "Content-Type": {events.ContentTypeJSON}}
	_, err = r.bus.ScheduleAt(ctx, confirmation.ScheduleSubject(id), confirmation.FiredSubject(id), due, header, body,
		events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: v.lastSeq})
	return err
}

// unansweredView is the deadline view of a confirmation whose only event
// is its request, read without reading its history: the last message of
// heed.confirm.<id>.> is the request, and it is the only request. ok is
// false otherwise (answered, refused, delegated, asked twice, or a read
// failed): then the caller loads the history.
func (r *router) unansweredView(ctx context.Context, id string) (deadlineView, bool) {
	js := r.bus.JetStream()
	last, err := events.LastOf(ctx, js, events.EventStream, events.SubjectFilter("confirm", id))
	if err != nil || last == nil || last.Subject != events.ConfirmRequested.Subject(id) {
		return deadlineView{}, false
	}
	first, more, err := events.FirstOf(ctx, js, events.EventStream, last.Subject, 1)
	if err != nil || first == nil || first.Seq != last.Seq || more != 0 {
		return deadlineView{}, false
	}
	ev, err := r.bus.Codec().DecodeStored(*last)
	if err != nil {
		return deadlineView{}, false
	}
	st := confirmation.New(id)
	if _, err := st.Apply(ev, last.Seq); err != nil || st.Request == nil {
		return deadlineView{}, false
	}
	v := viewOf(st)
	v.lastSeq = last.Seq
	return v, true
}
