package confirm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/service"
	"github.com/heedhq/heed/services/learner"
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
	d := time.Duration(timeoutS * float64(time.Second))
	if d <= 0 {
		d = c.DefaultTimeout
	}
	d = min(max(d, c.MinTimeout), c.MaxTimeout)
	return t.Add(d)
}

// ConsumerName is the router's durable consumer.
const ConsumerName = "confirm-router"

type router struct {
	cfg   Config
	bus   *events.Bus
	log   *slog.Logger
	prefs jetstream.KeyValue
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
	for _, b := range learner.Buckets() {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	prefs, err := rt.Bus.JetStream().KeyValue(ctx, learner.PrefsBucket)
	if err != nil {
		return fmt.Errorf("preferences bucket: %w", err)
	}
	r := &router{cfg: cfg, bus: rt.Bus, log: rt.Log, prefs: prefs}
	svc, err := micro.AddService(rt.Conn, micro.Config{Name: "heed-confirm-commands", Version: service.Version, Description: "heed confirm router: validated confirmation requests"})
	if err != nil {
		return fmt.Errorf("register commands: %w", err)
	}
	if err := svc.AddEndpoint("request", micro.HandlerFunc(r.requestCommand), micro.WithEndpointSubject(SubjectRequest)); err != nil {
		return fmt.Errorf("register commands: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	cons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        ConsumerName,
		Description: "confirm router: answers confirmations in layers and enforces deadlines",
		Filters:     []string{"heed.confirm.*.requested", "heed.confirm.*.expired", "heed.confirm.*.answered"},
		Workers:     cfg.Workers,
		Logger:      rt.Log,
	}, r.handle)
	if err != nil {
		return err
	}
	rt.AddCheck("router", func() any { return cons.Stats() })
	<-ctx.Done()
	dctx, cancel := service.DrainContext()
	defer cancel()
	cons.Stop(dctx)
	return nil
}

func (r *router) handle(ctx context.Context, d *events.Delivery) ([]events.Event, error) {
	id := d.Event.Subject()
	switch events.Type(d.Event.Type()) {
	case events.ConfirmRequested:
		var req events.ConfirmRequestedData
		if err := json.Unmarshal(d.Event.Data(), &req); err != nil {
			return nil, events.Poison(err)
		}
		return nil, r.route(ctx, id, d, &req)
	case events.ConfirmExpired:
		return nil, r.expire(ctx, id, d)
	case events.ConfirmAnswered:
		return r.remember(ctx, id, d)
	}
	return nil, nil
}

// route decides how a request is answered, layer by layer: the --yes
// override, an operator rule, a learned preference, the run's agent
// (ai_assist), and otherwise people on every channel until the deadline,
// which the stream itself holds.
func (r *router) route(ctx context.Context, id string, d *events.Delivery, req *events.ConfirmRequestedData) error {
	if problem := Validate(req, MaxMessageBytes); problem != "" {
		// Nothing can be offered: answer it as an error with the safest
		// choice so whoever waits is not left hanging.
		return r.answer(ctx, id, d.Seq, req, events.ConfirmAnsweredData{Choice: SafeChoice(req), Method: events.MethodError, By: Source, Reason: "invalid request: " + problem}, "error")
	}
	if req.Yes {
		return r.answer(ctx, id, d.Seq, req, events.ConfirmAnsweredData{Choice: ProceedChoice(req), Method: events.MethodOverride, By: Source, Reason: "--yes override"}, "override")
	}
	rule, err := r.cfg.Rules.Match(req)
	if err != nil {
		r.log.Warn("rule failed; asking people", "confirm", id, "err", err)
	}
	if rule != nil && !rule.Ask {
		choice := rule.Answer
		if choice == "proceed" && !hasOption(req, "proceed") {
			choice = ProceedChoice(req)
		}
		if hasOption(req, choice) {
			return r.answer(ctx, id, d.Seq, req, events.ConfirmAnsweredData{Choice: choice, Method: events.MethodMemory, By: Source, Reason: "rule: " + rule.Name}, "rule")
		}
		r.log.Warn("rule answer is not an option; asking people", "confirm", id, "rule", rule.Name, "answer", rule.Answer)
	}
	if rule == nil && req.LearnPreference {
		if p, ok := r.preference(ctx, req); ok && hasOption(req, p.Choice) {
			return r.answer(ctx, id, d.Seq, req, events.ConfirmAnsweredData{Choice: p.Choice, Method: events.MethodMemory, By: Source,
				Reason: fmt.Sprintf("remembered choice %s (set by %s)", p.ID, p.By), LearnedFrom: p.LearnedFrom}, "memory")
		}
	}
	deadline := r.cfg.Deadline(d.Event.Time(), req.TimeoutS)
	var extra []events.Event
	if req.AIAssist && req.Agent != "" {
		del, err := events.NewEvent(events.ConfirmDelegated, id, id+"/delegated", Source, events.ConfirmDelegatedData{
			Agent: req.Agent, RunID: req.RunID, Skill: req.Skill, Step: req.Step, Message: req.Message, Options: req.Options,
			Default: DefaultChoice(req), Deadline: deadline.UTC(), Context: req.Context,
			Question: "Review the context and answer with `heed continue " + req.RunID + " --choice <value> --reason <why>`.",
		})
		if err != nil {
			return err
		}
		extra = append(extra, del)
	}
	return r.scheduleDeadline(ctx, id, d.Seq, req, deadline, extra)
}

// scheduleDeadline stores the deadline in the stream as a message
// schedule: it fires even if no router is running at that moment, and 100k
// pending deadlines cost no goroutine. It is written only if nothing was
// appended to the confirmation since the request (an early answer).
func (r *router) scheduleDeadline(ctx context.Context, id string, seq uint64, req *events.ConfirmRequestedData, deadline time.Time, extra []events.Event) error {
	exp, err := events.NewEvent(events.ConfirmExpired, id, id+"/expired", Source, events.ConfirmExpiredData{Deadline: deadline.UTC(), Default: DefaultChoice(req), RunID: req.RunID})
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 5; attempt++ {
		ack, err := r.bus.Schedule(ctx, &exp, ScheduleSubject(id), deadline, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: seq})
		if err == nil {
			_ = ack
			return r.bus.PublishAll(ctx, extra)
		}
		if !errors.Is(err, events.ErrConflict) {
			return err
		}
		st, lerr := Load(ctx, r.bus, id)
		if lerr != nil {
			return lerr
		}
		if !st.Open() || st.Expired != nil {
			return nil // answered (or expired) meanwhile: no deadline needed
		}
		seq = st.LastSeq
	}
	return events.Errorf(events.CodeConflict, "confirmation %s keeps changing", id)
}

// preference looks up a remembered choice for the request.
func (r *router) preference(ctx context.Context, req *events.ConfirmRequestedData) (learner.Pref, bool) {
	var ids []string
	if tool, _ := req.Context["tool"].(string); tool != "" {
		if msg, _ := req.Context["error"].(string); msg != "" {
			ids = append(ids, events.PrefID(events.ScopeError, tool, learner.ErrorSignature(msg)))
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
		if p, ok := learner.ReadPref(e.Value()); ok {
			return p, true
		}
	}
	return learner.Pref{}, false
}

// remember turns an answer that asked to be remembered into a preference
// event (or revokes one for "ask again").
func (r *router) remember(ctx context.Context, id string, d *events.Delivery) ([]events.Event, error) {
	var a events.ConfirmAnsweredData
	if err := json.Unmarshal(d.Event.Data(), &a); err != nil {
		return nil, events.Poison(err)
	}
	if a.Remember == "" {
		return nil, nil
	}
	st, err := Load(ctx, r.bus, id)
	if err != nil {
		return nil, err
	}
	req := st.Request
	var prefID string
	set := events.PrefSetData{Choice: a.Choice, By: a.By, LearnedFrom: d.Event.ID(), ConfirmID: id}
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
		prefID = events.PrefID(events.ScopeError, tool, learner.ErrorSignature(msg))
		set.Scope, set.Tool, set.ErrorPattern = events.ScopeError, tool, learner.ErrorSignature(msg)
	}
	if a.Remember == "ask_again" {
		ev, err := events.NewEvent(events.PrefForgotten, prefID, d.Event.ID()+"/forget", Source, events.PrefForgottenData{By: a.By, Reason: "ask again (answer " + d.Event.ID() + ")"})
		if err != nil {
			return nil, err
		}
		return []events.Event{ev}, nil
	}
	ev, err := events.NewEvent(events.PrefSet, prefID, d.Event.ID()+"/pref", Source, set)
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

// expire answers with the default when the deadline fired first.
func (r *router) expire(ctx context.Context, id string, d *events.Delivery) error {
	var exp events.ConfirmExpiredData
	if err := json.Unmarshal(d.Event.Data(), &exp); err != nil {
		return events.Poison(err)
	}
	_, err := Answer(ctx, r.bus, Source, id, events.ConfirmAnsweredData{
		Choice: exp.Default, Method: events.MethodTimeout, By: Source, Reason: "no answer before the deadline " + exp.Deadline.UTC().Format(time.RFC3339),
	}, WithEventID(id+"/answer/timeout"))
	var already *AlreadyAnsweredError
	if errors.As(err, &already) {
		return nil
	}
	return err
}

// answer publishes an answer expecting the request to be the
// confirmation's last event; on a conflict it falls back to Answer.
func (r *router) answer(ctx context.Context, id string, seq uint64, req *events.ConfirmRequestedData, a events.ConfirmAnsweredData, tag string) error {
	a.RunID = req.RunID
	ev, err := events.NewEvent(events.ConfirmAnswered, id, id+"/answer/"+tag, Source, a)
	if err != nil {
		return err
	}
	_, err = r.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: seq}, events.PurgeSchedule{Subject: ScheduleSubject(id)})
	if errors.Is(err, events.ErrConflict) {
		_, err = Answer(ctx, r.bus, Source, id, a, WithEventID(id+"/answer/"+tag))
		var already *AlreadyAnsweredError
		if errors.As(err, &already) {
			return nil
		}
	}
	return err
}

// ProceedChoice is the option --yes picks: one whose value means go ahead,
// else the first option that is not cancel.
func ProceedChoice(req *events.ConfirmRequestedData) string {
	for _, want := range []string{"proceed", "yes", "continue", "approve", "confirm", "ok"} {
		for _, o := range req.Options {
			if strings.EqualFold(o.Value, want) {
				return o.Value
			}
		}
	}
	for _, o := range req.Options {
		if !isCancel(o.Value) {
			return o.Value
		}
	}
	return req.Options[0].Value
}

// DefaultChoice is what a timeout answers: the request's default, else the
// safest option.
func DefaultChoice(req *events.ConfirmRequestedData) string {
	if req.Default != "" {
		return req.Default
	}
	return SafeChoice(req)
}

// SafeChoice prefers cancelling.
func SafeChoice(req *events.ConfirmRequestedData) string {
	for _, o := range req.Options {
		if isCancel(o.Value) {
			return o.Value
		}
	}
	if len(req.Options) == 0 {
		return "cancel"
	}
	return req.Options[len(req.Options)-1].Value
}

func isCancel(v string) bool {
	switch strings.ToLower(v) {
	case "cancel", "abort", "no", "deny", "reject", "stop":
		return true
	}
	return false
}

// MaxMessageBytes bounds a confirmation's message.
const MaxMessageBytes = 8000

// Validate reports what makes a request unanswerable: an empty or
// over-long message, control characters in the message, title or options,
// no options, duplicate option values, a default that is not an option.
func Validate(req *events.ConfirmRequestedData, maxMessage int) string {
	if strings.TrimSpace(req.Message) == "" {
		return "empty message"
	}
	if len(req.Message) > maxMessage {
		return fmt.Sprintf("message is %d bytes; the limit is %d", len(req.Message), maxMessage)
	}
	if len(req.Options) == 0 {
		return "no options"
	}
	if hasControl(req.Message) {
		return "message contains control characters"
	}
	// The title and options reach the same terminals as the message: an
	// escape sequence there could disguise what is being asked.
	if hasControl(req.Title) {
		return "title contains control characters"
	}
	seen := map[string]bool{}
	for _, o := range req.Options {
		if strings.TrimSpace(o.Value) == "" || strings.TrimSpace(o.Label) == "" {
			return "an option has an empty label or value"
		}
		if hasControl(o.Value) || hasControl(o.Label) || hasControl(o.Description) {
			return fmt.Sprintf("option %q contains control characters", o.Value)
		}
		if seen[o.Value] {
			return "option value " + o.Value + " appears twice"
		}
		seen[o.Value] = true
	}
	if req.Default != "" && !seen[req.Default] {
		return "default " + req.Default + " is not one of the options"
	}
	return ""
}

// hasControl reports whether s holds a control character (C0, DEL, C1)
// other than a line feed or a tab: escape sequences, carriage returns.
func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return true
		}
	}
	return false
}
