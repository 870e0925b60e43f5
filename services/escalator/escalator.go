// Package escalator is the escalator service: it scores agent sessions'
// requests to do risky operations, approves the safe ones with safeguards
// (rules, the learned cache), offers the others to tiers of approvers as
// confirmations, escalates on a tier's deadline or when nobody in it is
// present, applies the final action after the last tier, and answers
// whether a session may start new risky work (docs/ESCALATIONS.md).
package escalator

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/escalation"
	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go"
)

// ConsumerName is the escalator's durable consumer.
const ConsumerName = "escalator"

// DefaultPresenceTimeout bounds one presence request ("no responders" is
// immediate).
const DefaultPresenceTimeout = 250 * time.Millisecond

// Config configures the escalator.
type Config struct {
	ConfigFile      string // escalation config (YAML); "" is the default
	Workers         int
	PresenceTimeout time.Duration
}

type escalator struct {
	rs       *Rules
	bus      *events.Bus
	nc       *nats.Conn
	log      *slog.Logger
	cache    *events.BucketCache // heed_decisions
	held     *heldIndex
	m        *metrics
	presence time.Duration
	now      func() time.Time
	// routed: escalations whose request the command routed in this
	// process, every write of it made by this call (not one that found
	// it routed already: its writes may have stopped half way). The
	// consumer's copy of their requested event has nothing left to do
	// (deciding a routed request again writes nothing), so it is not
	// read from the log again.
	routed *recentSet
	// inflight: requests the command is deciding now; the consumer's
	// copy waits for it, then finds it in routed (or finishes it).
	inflight *inflight
}

// Run runs the escalator until ctx is done.
func Run(ctx context.Context, rt *service.Runtime, o Config) error {
	rs, err := LoadRules(o.ConfigFile)
	if err != nil {
		return err
	}
	for _, b := range readmodel.Specs(readmodel.DecisionsBucket, readmodel.EscalationsBucket) {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	// The cache's keys alone: the bucket also keeps a marker for every
	// confirmation ever asked, which held in memory here grew without end.
	cache, err := events.WatchBucket(ctx, rt.Bus.JetStream(), readmodel.DecisionsBucket, readmodel.DecisionCacheKeys)
	if err != nil {
		return err
	}
	defer cache.Stop()
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.PresenceTimeout <= 0 {
		o.PresenceTimeout = DefaultPresenceTimeout
	}
	e := &escalator{rs: rs, bus: rt.Bus, nc: rt.Conn, log: rt.Log, cache: cache, held: newHeldIndex(rs.Session.MaxHeld), m: newMetrics(rt.Metrics), presence: o.PresenceTimeout, now: time.Now, routed: newRecentSet(8192), inflight: newInflight()}
	// The held index starts from the projection, which the projector then
	// carries on from the position it stopped at.
	if err := e.held.load(ctx, rt.Bus.JetStream()); err != nil {
		return err
	}
	e.m.held.Set(float64(e.held.count()))
	proj, err := events.RunProjector(ctx, rt.Bus, &Projection{OnSummary: e.held.apply}, rt.Log)
	if err != nil {
		return err
	}
	select {
	case <-cache.Ready():
	case <-ctx.Done():
		return nil
	}
	cons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        ConsumerName,
		Gate:        rt.Current, // a paused instance does not act on what it fetched (Runtime.Current)
		Description: "escalator: routes escalation requests, acts on the answers and deadlines of its offers",
		Filters:     []string{"heed.escalation.*.requested", "heed.confirm.*.answered", "heed.confirm.*.expired"},
		// A delivery a crashed escalator held comes back soon: deciding
		// takes milliseconds (presence requests at most PresenceTimeout).
		AckWait: 5 * time.Second,
		Workers: o.Workers,
		Logger:  rt.Log,
		PartitionKey: func(ev *events.Event) string {
			if esc, _, ok := events.OfferOfConfirmID(ev.Subject()); ok {
				return esc
			}
			return ev.Subject()
		},
		Middleware: []events.Middleware{events.Retry(3, 20*time.Millisecond)},
	}, e.routes().Handle)
	if err != nil {
		proj.Stop(context.Background())
		return err
	}
	svc, err := e.serve(ctx, rt)
	if err != nil {
		return err
	}
	rt.AddCheck("escalator", func() any { return cons.Stats() })
	go e.resume(ctx)
	<-ctx.Done()
	_ = svc.Stop()
	dctx, cancel := service.DrainContext()
	defer cancel()
	cons.Stop(dctx)
	proj.Stop(dctx)
	return nil
}

// resume decides again every escalation held when the escalator starts:
// one a crash left between two steps (escalated, not yet offered) goes on
// at once instead of after its delivery's ack wait. Deciding an escalation
// that is complete writes nothing.
func (e *escalator) resume(ctx context.Context) {
	for _, id := range e.held.ids() {
		if ctx.Err() != nil {
			return
		}
		if _, err := e.process(ctx, id, Cause{}); err != nil && ctx.Err() == nil {
			e.log.Warn("resume escalation", "escalation", id, "err", err)
		}
	}
}

func (e *escalator) routes() *events.Routes {
	r := events.NewRoutes()
	events.On(r, events.EscalationRequested, func(ctx context.Context, d *events.Delivery, req *events.EscalationRequestedData) ([]events.Event, error) {
		id := d.Event.Subject()
		if err := e.inflight.wait(ctx, id); err != nil {
			return nil, err
		}
		if e.routed.has(id) {
			return nil, nil
		}
		_, err := e.process(ctx, id, Cause{Request: req})
		return nil, err
	})
	events.On(r, events.ConfirmAnswered, func(ctx context.Context, d *events.Delivery, _ *events.ConfirmAnsweredData) ([]events.Event, error) {
		return nil, e.onConfirmation(ctx, d.Event.Subject(), d.Seq, false)
	})
	events.On(r, events.ConfirmExpired, func(ctx context.Context, d *events.Delivery, _ *events.ConfirmExpiredData) ([]events.Event, error) {
		return nil, e.onConfirmation(ctx, d.Event.Subject(), d.Seq, true)
	})
	return r
}

// onConfirmation acts on the answer that took effect on one of our offers
// (other confirmations are left alone at once).
func (e *escalator) onConfirmation(ctx context.Context, confirmID string, seq uint64, expired bool) error {
	escID, _, ok := events.OfferOfConfirmID(confirmID)
	if !ok {
		return nil
	}
	c := Cause{ConfirmID: confirmID, Expired: expired}
	if !expired {
		// Read until the answer delivered is in what is read: a direct
		// get on an R3 stream may be answered by a replica behind the
		// log, and an answer not seen here would be left for the tier's
		// deadline to escalate.
		cs, err := confirmation.LoadVerdictsAt(ctx, e.bus, confirmID, seq)
		if err != nil {
			if events.CodeOf(err) == events.CodeNotFound {
				return nil
			}
			return err
		}
		if cs.Request == nil || cs.Request.Requester != Source || cs.Answer == nil {
			return nil // not ours, or a vote that decides nothing yet
		}
		c.Answer = cs.Answer
		if w := cs.Gate.Winner; w != nil {
			for _, v := range w.Votes {
				c.Votes = append(c.Votes, events.EscalationVote{Choice: v.Choice, By: v.By, Channel: v.Channel, At: v.At})
			}
		}
	}
	_, err := e.process(ctx, escID, c)
	return err
}

// load reads an escalation from the log. Every message counts for Seq,
// valid or not (the expected-sequence guard counts them all).
func (e *escalator) load(ctx context.Context, id string) (*command.EscalationState, error) {
	st := escalation.New(id)
	_, err := events.ReadHistory(ctx, e.bus.JetStream(), events.EventStream, events.SubjectFilter("escalation", id), 0, func(raw events.RawMsg) error {
		ev, err := e.bus.Codec().DecodeStored(raw)
		if err == nil {
			err = escalation.Apply(st, ev, raw.Seq)
		}
		st.Seq = max(st.Seq, raw.Seq)
		return err
	})
	return st, err
}

// process reads the escalation, decides, writes: the first event guarded
// by the aggregate's last sequence (a concurrent writer makes it read and
// decide again), the offer's confirmation only if it does not exist.
func (e *escalator) process(ctx context.Context, id string, c Cause) (*command.EscalationState, error) {
	return e.processFrom(ctx, id, c, nil)
}

// processFrom is process starting from a state already read (nil: read
// it); after a lost race it reads the log again.
func (e *escalator) processFrom(ctx context.Context, id string, c Cause, known *command.EscalationState) (*command.EscalationState, error) {
	return events.RetryStale(ctx, 10, func() (*command.EscalationState, error) {
		st := known
		known = nil
		if st == nil {
			var err error
			if st, err = e.load(ctx, id); err != nil {
				return nil, err
			}
		}
		return e.attempt(ctx, id, c, st)
	})
}

// attempt decides from st and writes what it decided, once: a race lost
// (the log holds more than st) is an error wrapping events.ErrStaleRead.
func (e *escalator) attempt(ctx context.Context, id string, c Cause, st *command.EscalationState) (*command.EscalationState, error) {
	var asked time.Duration // the presence check is an effect, not deciding
	start := time.Now()
	evs, next, err := decide(e.rs, st, c, e.facts(ctx, &asked))
	if err != nil {
		return nil, err
	}
	e.m.decideLat.Observe((time.Since(start) - asked).Seconds())
	// The escalation's events first, in one batch guarded by what st
	// read: a decider that lost a race (another process, or the command
	// and the consumer on one request), or whose events are in the log
	// already (a retry), writes nothing, not even a confirmation nobody
	// would act on. An offer's confirmation follows its offered event in
	// the same batch, guarded by "no such confirmation yet": a new offer's
	// cannot exist, but one written by someone else stops the batch there
	// and the decision is read and made again from the log, which writes
	// only the confirmation, alone, and takes the one that is there.
	var batch []events.Event
	var confirmGuards []events.GuardAt
	var loose []*events.Event // confirmations with no event of the escalation to follow
	nMine := 0
	for i := range evs {
		if events.Type(evs[i].Type()).Kind() == "escalation" {
			batch = append(batch, evs[i])
			nMine++
		}
	}
	for i := range evs {
		ev := &evs[i]
		if events.Type(ev.Type()).Kind() == "escalation" {
			continue
		}
		guard := events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", ev.Subject()), Seq: 0}
		if nMine == 0 {
			loose = append(loose, ev)
			continue
		}
		confirmGuards = append(confirmGuards, events.GuardAt{Index: len(batch), Guard: guard})
		batch = append(batch, *ev)
	}
	if nMine > 0 {
		seq, err := e.bus.PublishAllGuarded(ctx, batch, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("escalation", id), Seq: st.Seq}, confirmGuards...)
		if err != nil {
			return nil, err
		}
		// next has every event folded in already; the log gives the
		// sequence: the batch's last, which is the offer's confirmation's
		// when one rode behind (a batch says only its last). Nothing
		// guards a write by next.Seq: writes read the escalation again.
		next.Seq = max(next.Seq, seq)
		for i := range batch[:nMine] {
			e.count(&batch[i], next)
		}
	}
	for _, ev := range loose {
		if _, err := e.bus.Publish(ctx, ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", ev.Subject()), Seq: 0}); err != nil && !errors.Is(err, events.ErrStaleRead) {
			return nil, err
		}
	}
	e.held.set(next)
	e.m.held.Set(float64(e.held.count()))
	return next, nil
}

// count counts a written event in the metrics, its labels from st (the
// state with it folded in: no second decoding of its data).
func (e *escalator) count(ev *events.Event, st *command.EscalationState) {
	switch events.Type(ev.Type()) {
	case events.EscalationRouted:
		if st.Routed != nil {
			e.m.routed.WithLabelValues(st.Routed.Decision).Inc()
		}
	case events.EscalationOffered:
		e.m.offers.Inc()
	case events.EscalationEscalated:
		// Its id ends in its escalation count.
		n := ev.ID()[strings.LastIndexByte(ev.ID(), '/')+1:]
		if i, err := strconv.Atoi(n); err == nil && i >= 1 && i <= len(st.Escalations) {
			e.m.escalated.WithLabelValues(st.Escalations[i-1].Reason).Inc()
		}
	case events.EscalationDecided:
		if st.Decided != nil {
			e.m.decided.WithLabelValues(st.Decided.Decision, st.Decided.Method).Inc()
		}
	}
}

// facts are what Decide may ask of the world; the time spent asking who
// is present is added to asked.
func (e *escalator) facts(ctx context.Context, asked *time.Duration) Facts {
	return Facts{
		Now: e.now().UTC(),
		Reachable: func(_ string, members []string) (bool, []string) {
			start := time.Now()
			ok := e.reachable(ctx, members)
			*asked += time.Since(start)
			return ok, members
		},
		Cache: func(operation, environment, scope string) *readmodel.Decision {
			var d readmodel.Decision
			if e.cache.Get(readmodel.EscalationDecisionKey(operation, environment, scope), &d) {
				return &d
			}
			return nil
		},
	}
}

// reachable asks every member's presence subject at once: any reply means
// someone is there; "no responders" for all, or silence, means nobody.
func (e *escalator) reachable(ctx context.Context, members []string) bool {
	ctx, cancel := context.WithTimeout(ctx, e.presence)
	defer cancel()
	found := make(chan bool, len(members))
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.nc.RequestWithContext(ctx, events.PresenceSubject(m), nil)
			found <- err == nil
		}()
	}
	go func() { wg.Wait(); close(found) }()
	for ok := range found {
		if ok {
			return true
		}
	}
	return false
}

func actor(s, dflt string) string {
	if strings.TrimSpace(s) == "" {
		return dflt
	}
	return s
}
