package confirm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// Source is the CloudEvents source of the router's events.
const Source = "heed/confirm-router"

// Config configures the router.
type Config struct {
	DefaultTimeout time.Duration // when a request has none; default 300s
	MinTimeout     time.Duration // requests are clamped to [Min, Max]
	MaxTimeout     time.Duration
	Workers        int
	// RulesFile holds standing decisions (see docs/CONFIRMATIONS.md).
	RulesFile string
	Rules     *Rules
}

func (c *Config) defaults() {
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = 300 * time.Second
	}
	if c.MinTimeout <= 0 {
		c.MinTimeout = time.Second
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 24 * time.Hour
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
}

// Deadline is when a request made at t with timeout_s expires.
func (c Config) Deadline(t time.Time, timeoutS float64) time.Time {
	return confirmation.Bounds{Default: c.DefaultTimeout, Min: c.MinTimeout, Max: c.MaxTimeout}.Deadline(t, timeoutS)
}

// ConsumerName is the router's durable consumer.
const ConsumerName = "confirm-router"

// AnswersConsumerName is the router's durable consumer of answers.
const AnswersConsumerName = "confirm-router-answers"

// DeadlineConsumerName is the router's durable consumer of fired deadlines.
const DeadlineConsumerName = "confirm-router-deadlines"

type router struct {
	cfg Config
	bus *events.Bus
	log *slog.Logger
	// current refuses commands while this instance may not act
	// (service.Runtime.Current).
	current func() error
	prefs   jetstream.KeyValue
	stream  jetstream.Stream
	gates   *gates
	m       *service.Metrics
}

// Run runs the router until ctx is done, then drains.
func Run(ctx context.Context, rt *service.Runtime, cfg Config) error {
	cfg.defaults()
	if cfg.Rules == nil && cfg.RulesFile != "" {
		rules, err := LoadRules(cfg.RulesFile)
		if err != nil {
			return err
		}
		cfg.Rules = rules
		rt.Log.Info("confirmation rules loaded", "file", cfg.RulesFile, "rules", len(rules.List))
	}
	for _, b := range readmodel.Specs(readmodel.PrefsBucket) {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	prefs, err := events.BindBucket(ctx, rt.Bus.JetStream(), readmodel.PrefsBucket)
	if err != nil {
		return fmt.Errorf("preferences bucket: %w", err)
	}
	stream, err := events.BindStream(ctx, rt.Bus.JetStream(), events.EventStream)
	if err != nil {
		return fmt.Errorf("event stream: %w", err)
	}
	r := &router{cfg: cfg, bus: rt.Bus, log: rt.Log, prefs: prefs, stream: stream, m: rt.Metrics, current: rt.Current}
	r.gates = newGates(heldConfirmations, r.firstSeq)
	svc, err := micro.AddService(rt.Conn, micro.Config{Name: "heed-confirm-commands", Version: service.Version, Description: "heed confirm router: validated confirmation requests and people's answers"})
	if err != nil {
		return fmt.Errorf("register commands: %w", err)
	}
	if err := r.registerCommands(ctx, svc); err != nil {
		return fmt.Errorf("register commands: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	cons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        ConsumerName,
		Gate:        rt.Current, // a paused instance does not act on what it fetched (Runtime.Current)
		HeldBack:    r.heldBack,
		Description: "confirm router: answers confirmations in layers and sets their deadlines",
		Filters:     []string{"heed.confirm.*.requested"},
		Workers:     cfg.Workers,
		Logger:      rt.Log,
		Middleware:  []events.Middleware{events.Retry(3, 20*time.Millisecond)},
	}, r.routes().Handle)
	if err != nil {
		return err
	}
	// Judging answers reads each confirmation back from the log: it has a
	// consumer of its own, so that it never delays the answering of new
	// requests.
	judge, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        AnswersConsumerName,
		Gate:        rt.Current, // a paused instance does not act on what it fetched (Runtime.Current)
		HeldBack:    r.heldBack,
		Description: "confirm router: judges every answer (the first valid one takes effect), reports refusals, remembers choices, answers expired confirmations with their default",
		Filters:     []string{"heed.confirm.>"},
		Workers:     cfg.Workers,
		Logger:      rt.Log,
	}, r.handleAnswers)
	if err != nil {
		cons.Stop(ctx)
		return err
	}
	deadlines, err := r.consumeDeadlines(ctx)
	if err != nil {
		cons.Stop(ctx)
		judge.Stop(ctx)
		return err
	}
	rt.WatchDurable(events.EventStream, DeadlineConsumerName)
	rt.AddCheck("router", func() any { return cons.Stats() })
	rt.AddCheck("answers", func() any { return judge.Stats() })
	<-ctx.Done()
	dctx, cancel := service.DrainContext()
	defer cancel()
	deadlines.Drain()
	cons.Stop(dctx)
	judge.Stop(dctx)
	return nil
}

// routes are the router's typed handlers: each request is routed.
func (r *router) routes() *events.Routes {
	routes := events.NewRoutes()
	events.On(routes, events.ConfirmRequested, func(ctx context.Context, d *events.Delivery, req *events.ConfirmRequestedData) ([]events.Event, error) {
		return nil, r.route(ctx, d.Event.Subject(), d, req)
	})
	return routes
}

// firstSeq is the sequence of a confirmation's first message in the log.
func (r *router) firstSeq(id string) (uint64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := r.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(events.SubjectFilter("confirm", id)))
	if err != nil {
		return 0, false
	}
	return m.Sequence, true
}

// handleAnswers sees every event of every confirmation, in log order: it
// keeps the confirmations whole in memory (gates) and judges each answer.
func (r *router) handleAnswers(ctx context.Context, d *events.Delivery) ([]events.Event, error) {
	st := r.gates.observe(d)
	var out []events.Event
	var err error
	switch events.Type(d.Event.Type()) {
	case events.ConfirmAnswered:
		if st == nil && r.gates.takeSettled(d.Event.Subject(), d.Seq) {
			// As judge does for an answer that took effect: one that did
			// not come from heed's writer left the deadline scheduled.
			return nil, r.purgeUnlessScheduler(ctx, d)
		}
		out, err = r.judge(ctx, d.Event.Subject(), d, st)
	case events.ConfirmExpired:
		err = r.expire(ctx, d.Event.Subject(), r.expiryView(ctx, d, st))
	default:
		return nil, nil
	}
	if err != nil {
		r.gates.drop(d.Event.Subject())
	}
	return out, err
}

// heldBack forgets the cached gate of a confirmation whose event the
// consumer held back (events.ConsumerConfig.HeldBack), and caches it no
// more: its next events may come before it, and a command judging from
// the cache would miss it.
func (r *router) heldBack(subject string) {
	if kind, id, _, ok := events.ParseSubject(subject); ok && kind == "confirm" {
		r.gates.heldBack(id)
	}
}

// route decides how a request is answered, layer by layer: the --yes
// override, an operator rule, a learned preference, the run's agent
// (ai_assist), and otherwise people on every channel until the deadline,
// which the stream itself holds.
func (r *router) route(ctx context.Context, id string, d *events.Delivery, req *events.ConfirmRequestedData) error {
	dec, err := decideRoute(r.cfg, id, req, d.Event.Time(), time.Now().UTC(), func(req *events.ConfirmRequestedData) (readmodel.Pref, bool) { return r.preference(ctx, req) })
	for _, w := range dec.Warnings {
		r.log.Warn(w, "confirm", id)
	}
	if err != nil {
		return err
	}
	if dec.Answer != nil {
		return r.answer(ctx, id, d.Seq, req, *dec.Answer, dec.Tag)
	}
	return r.scheduleDeadline(ctx, id, d.Seq, req, dec.Deadline, dec.Then)
}

// scheduleDeadline stores the deadline in the stream as a message
// schedule: it fires even if no router is running at that moment, and 100k
// pending deadlines cost no goroutine. It is written only if nothing was
// appended to the confirmation since the request (an early answer).
func (r *router) scheduleDeadline(ctx context.Context, id string, seq uint64, req *events.ConfirmRequestedData, deadline time.Time, extra []events.Event) error {
	body, err := json.Marshal(deadlineBody{ConfirmID: id, Deadline: deadline.UTC(), Default: confirmation.DefaultChoice(req), RunID: req.RunID})
	if err != nil {
		return err
	}
	header := nats.Header{HeaderSchedule: {scheduleKind}, events.HeaderMsgID: {"sched:" + id}, "Content-Type": {events.ContentTypeJSON}}
	_, err = events.RetryStale(ctx, 5, func() (struct{}, error) {
		_, err := r.bus.ScheduleAt(ctx, confirmation.ScheduleSubject(id), confirmation.FiredSubject(id), deadline, header, body,
			events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: seq})
		if err == nil {
			return struct{}{}, r.bus.PublishAll(ctx, extra)
		}
		if !errors.Is(err, events.ErrStaleRead) {
			return struct{}{}, err
		}
		st, lerr := confirmation.Load(ctx, r.bus, id)
		if lerr != nil {
			return struct{}{}, lerr
		}
		if !st.Open() || st.Expired != nil {
			return struct{}{}, nil // answered (or expired) meanwhile: no deadline needed
		}
		seq = st.LastSeq
		return struct{}{}, err
	})
	return err
}

// preference looks up a remembered choice for the request.
func (r *router) preference(ctx context.Context, req *events.ConfirmRequestedData) (readmodel.Pref, bool) {
	var ids []string
	if tool, _ := req.Context["tool"].(string); tool != "" {
		if msg, _ := req.Context["error"].(string); msg != "" {
			ids = append(ids, events.PrefID(events.ScopeError, tool, events.ErrorSignature(msg)))
		}
	}
	if req.Skill != "" && req.Step != "" {
		ids = append(ids, events.PrefID(events.ScopeSkillStep, req.Skill, req.Step))
	}
	for _, id := range ids {
		e, err := r.prefs.Get(ctx, id)
		if err != nil {
			continue
		}
		var p readmodel.Pref
		if readmodel.Decode(e.Value(), &p) {
			return p, true
		}
	}
	return readmodel.Pref{}, false
}

// judge applies the rule every reader applies to an answer (the first
// valid one in log order takes effect) and acts on the verdict: a refused
// answer gets a heed.confirm.refused event naming why and the winner; the
// answer that took effect cancels the deadline (a direct publish does not
// carry the purge that heed's own writers send) and, if it asked to be
// remembered, becomes a preference.
// st is the confirmation as the answers consumer holds it, or nil: then it
// is read from the log.
func (r *router) judge(ctx context.Context, id string, d *events.Delivery, st *confirmation.State) ([]events.Event, error) {
	if st == nil {
		// Only the verdicts: read from literal subjects, which the server
		// finds from its subject index. The wildcard of Load walks the log
		// from the question to the answer, a confirmation asked long ago
		// (one of more than the router keeps, or after a restart) a block
		// of messages or more at each read.
		var err error
		st, err = confirmation.LoadVerdictsAt(ctx, r.bus, id, d.Seq)
		if err != nil && events.CodeOf(err) != events.CodeNotFound {
			return nil, err
		}
	}
	a, ok := st.AnswerAt(d.Seq)
	if !ok {
		return nil, nil // not in the log as read: nothing to judge
	}
	if a.Refusal != nil {
		if st.Reported[a.EventID] {
			return nil, nil
		}
		ev, err := confirmation.RefusedEvent(id, Source, a)
		if err != nil {
			return nil, err
		}
		r.log.Info("answer refused", "confirm", id, "answer", a.EventID, "by", a.Data.By, "code", a.Refusal.Code, "reason", a.Refusal.Reason)
		return []events.Event{ev}, nil
	}
	if a.Counted {
		return nil, nil // a vote: the deadline runs on until the quorum is reached
	}
	// heed's own writers cancel the deadline in the answer's write; an
	// answer published straight to the log did not.
	if err := r.purgeUnlessScheduler(ctx, d); err != nil {
		return nil, err
	}
	out, err := r.remember(ctx, id, d.Event.ID(), st.Request, &a.Data)
	// The cached copy, if that is what st is, is shared with the answer
	// command's clones: compact it under the cache's lock (a state read
	// from the log is dropped anyway).
	r.gates.compact(id)
	return out, err
}

// remember turns an answer that asked to be remembered into a preference
// event (or revokes one for "ask again").
//
// The preference's own history is read first: an answer judged again
// (after the answers consumer was recreated, long after the duplicate
// window) must not set a preference that a person has since forgotten.
func (r *router) remember(ctx context.Context, id, answerID string, req *events.ConfirmRequestedData, a *events.ConfirmAnsweredData) ([]events.Event, error) {
	if a.Remember == "" || req == nil {
		return nil, nil
	}
	var prefID string
	set := events.PrefSetData{Choice: a.Choice, By: a.By, LearnedFrom: answerID, ConfirmID: id}
	switch a.Remember {
	case "skill_step", "ask_again":
		if req.Skill == "" || req.Step == "" {
			return nil, nil
		}
		prefID = events.PrefID(events.ScopeSkillStep, req.Skill, req.Step)
		set.Scope, set.Skill, set.Step = events.ScopeSkillStep, req.Skill, req.Step
	case "error":
		tool, _ := req.Context["tool"].(string)
		msg, _ := req.Context["error"].(string)
		if tool == "" || msg == "" {
			return nil, nil
		}
		prefID = events.PrefID(events.ScopeError, tool, events.ErrorSignature(msg))
		set.Scope, set.Tool, set.ErrorPattern = events.ScopeError, tool, events.ErrorSignature(msg)
	}
	if prefID == "" {
		return nil, nil
	}
	eventID := answerID + "/pref"
	if a.Remember == "ask_again" {
		eventID = answerID + "/forget"
	}
	done := false
	if _, err := events.ReadHistory(ctx, r.bus.JetStream(), events.EventStream, events.SubjectFilter("pref", prefID), 0, func(raw events.RawMsg) error {
		done = done || raw.Header.Get(events.HeaderMsgID) == eventID
		return nil
	}); err != nil {
		return nil, err
	}
	if done {
		return nil, nil // remembered (or forgotten) for this answer before
	}
	if a.Remember == "ask_again" {
		ev, err := events.NewEvent(events.PrefForgotten, prefID, eventID, Source, events.PrefForgottenData{By: a.By, Reason: "ask again (answer " + answerID + ")"})
		if err != nil {
			return nil, err
		}
		return []events.Event{ev}, nil
	}
	ev, err := events.NewEvent(events.PrefSet, prefID, eventID, Source, set)
	if err != nil {
		return nil, err
	}
	return []events.Event{ev}, nil
}

func hasOption(req *events.ConfirmRequestedData, v string) bool {
	for _, o := range req.Options {
		if o.Value == v {
			return true
		}
	}
	return false
}

// expiryView is what expiring a confirmation needs of it at the expiry
// d: from the cache (whole, or waiting for its deadline), else from the
// subject index (expiredState); nil when neither knows it.
func (r *router) expiryView(ctx context.Context, d *events.Delivery, st *confirmation.State) *deadlineView {
	if st != nil {
		v := viewOf(st)
		return &v
	}
	if v, ok := r.gates.view(d.Event.Subject()); ok {
		return &v
	}
	if st := r.expiredState(ctx, d); st != nil {
		v := viewOf(st)
		return &v
	}
	return nil
}

// expire answers with the default when the deadline came first. v is the
// confirmation as the answers consumer knows it (nil: read the log): with
// it, a burst of deadlines costs one write each.
func (r *router) expire(ctx context.Context, id string, v *deadlineView) error {
	timeout := func(dflt, runID string, deadline time.Time) events.ConfirmAnsweredData {
		return events.ConfirmAnsweredData{
			Choice: dflt, Method: events.MethodTimeout, By: Source, Channel: "deadline", RunID: runID,
			Reason: "no answer before the deadline " + deadline.UTC().Format(time.RFC3339),
		}
	}
	if v != nil && v.open && v.expired {
		ev, err := events.NewEvent(events.ConfirmAnswered, id, id+"/answer/timeout", Source, timeout(v.dflt, v.runID, v.deadline))
		if err != nil {
			return err
		}
		_, err = r.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: v.lastSeq}, events.PurgeSchedule{Subject: confirmation.ScheduleSubject(id)})
		if !errors.Is(err, events.ErrStaleRead) {
			return err
		}
		// Something came after what the consumer holds: judge from the log.
	}
	full, err := confirmation.Load(ctx, r.bus, id)
	if err != nil {
		if events.CodeOf(err) == events.CodeNotFound {
			return nil // an expiry without a question: nothing to answer
		}
		return err
	}
	if !full.Open() || full.Expired == nil {
		return nil // answered first, or an expiry that came before its request
	}
	_, err = confirmation.Answer(ctx, r.bus, Source, id, timeout(full.Gate.Default, full.Gate.RunID, full.Expired.Deadline), confirmation.WithEventID(id+"/answer/timeout"))
	if events.CodeOf(err) == events.CodeConflict {
		return nil // answered first
	}
	return err
}

// answer publishes an answer expecting the request to be the
// confirmation's last event; on a conflict it falls back to the full
// first-answer gate.
func (r *router) answer(ctx context.Context, id string, seq uint64, req *events.ConfirmRequestedData, a events.ConfirmAnsweredData, tag string) error {
	a.RunID = req.RunID
	ev, err := events.NewEvent(events.ConfirmAnswered, id, id+"/answer/"+tag, Source, a)
	if err != nil {
		return err
	}
	_, err = r.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: seq}, events.PurgeSchedule{Subject: confirmation.ScheduleSubject(id)})
	if errors.Is(err, events.ErrStaleRead) {
		_, err = confirmation.Answer(ctx, r.bus, Source, id, a, confirmation.WithEventID(id+"/answer/"+tag))
		if events.CodeOf(err) == events.CodeConflict {
			return nil
		}
	}
	return err
}

// expiredState is the state of a confirmation the cache does not hold,
// at the expiry d, read from the subject index instead of its history (a
// burst of 10,000 deadlines must not read each history, which for a
// wildcard makes the server walk the log): its first request, no answer
// at all, and d. Refusals and delegations do not change whether it is
// open. The sequence its write is guarded by is the last message of the
// confirmation when read, so anything since makes the write stale and the
// history is read then. nil when that is not the case or a read failed.
func (r *router) expiredState(ctx context.Context, d *events.Delivery) *confirmation.State {
	id := d.Event.Subject()
	js := r.bus.JetStream()
	req, _, err := events.FirstOf(ctx, js, events.EventStream, events.ConfirmRequested.Subject(id), 1)
	if err != nil || req == nil || req.Seq >= d.Seq {
		return nil
	}
	if ans, err := events.LastOf(ctx, js, events.EventStream, events.ConfirmAnswered.Subject(id)); err != nil || ans != nil {
		return nil
	}
	last, err := events.LastOf(ctx, js, events.EventStream, events.SubjectFilter("confirm", id))
	if err != nil || last == nil {
		return nil
	}
	ev, err := r.bus.Codec().DecodeStored(*req)
	if err != nil {
		return nil
	}
	st := confirmation.New(id)
	if _, err := st.Apply(ev, req.Seq); err != nil || st.Request == nil {
		return nil
	}
	if _, err := st.Apply(d.Event, d.Seq); err != nil {
		return nil
	}
	st.LastSeq = max(st.LastSeq, last.Seq)
	return st
}

// purgeUnlessScheduler cancels the deadline of the confirmation whose
// answer d took effect, unless d's writer cancelled it in the same write
// (heed's writers do; an answer published straight to the log does not).
func (r *router) purgeUnlessScheduler(ctx context.Context, d *events.Delivery) error {
	id := d.Event.Subject()
	if d.Header().Get("Nats-Scheduler") == confirmation.ScheduleSubject(id) {
		return nil
	}
	if err := r.stream.Purge(ctx, jetstream.WithPurgeSubject(confirmation.ScheduleSubject(id))); err != nil {
		return fmt.Errorf("purge the deadline of %s: %w", id, err)
	}
	return nil
}
