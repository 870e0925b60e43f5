package confirm

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/service"
)

// Source is the CloudEvents source of the router's events.
const Source = "heed/confirm-router"

// Config configures the router.
type Config struct {
	DefaultTimeout time.Duration // when a request has none; default 300s
	MinTimeout     time.Duration // requests are clamped to [Min, Max]
	MaxTimeout     time.Duration
	Workers        int
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
	cfg Config
	bus *events.Bus
	log *slog.Logger
}

// Run runs the router until ctx is done, then drains.
func Run(ctx context.Context, rt *service.Runtime, cfg Config) error {
	cfg.defaults()
	r := &router{cfg: cfg, bus: rt.Bus, log: rt.Log}
	cons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        ConsumerName,
		Description: "confirm router: answers confirmations in layers and enforces deadlines",
		Filters:     []string{"heed.confirm.*.requested", "heed.confirm.*.expired"},
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
	}
	return nil, nil
}

// route decides how a request is answered. Layers, in order: the --yes
// override; otherwise people (every channel subscribed to the request)
// until the deadline, which the stream itself holds.
func (r *router) route(ctx context.Context, id string, d *events.Delivery, req *events.ConfirmRequestedData) error {
	if problem := Validate(req); problem != "" {
		// Nothing can be offered: answer it as an error with the safest
		// choice so whoever waits is not left hanging.
		return r.answer(ctx, id, d.Seq, req, events.ConfirmAnsweredData{Choice: SafeChoice(req), Method: events.MethodError, By: Source, Reason: "invalid request: " + problem}, "error")
	}
	if req.Yes {
		return r.answer(ctx, id, d.Seq, req, events.ConfirmAnsweredData{Choice: ProceedChoice(req), Method: events.MethodOverride, By: Source, Reason: "--yes override"}, "override")
	}
	deadline := r.cfg.Deadline(d.Event.Time(), req.TimeoutS)
	exp, err := events.NewEvent(events.ConfirmExpired, id, id+"/expired", Source, events.ConfirmExpiredData{Deadline: deadline.UTC(), Default: DefaultChoice(req), RunID: req.RunID})
	if err != nil {
		return err
	}
	_, err = r.bus.Schedule(ctx, &exp, ScheduleSubject(id), deadline, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: d.Seq})
	if errors.Is(err, events.ErrConflict) {
		st, lerr := Load(ctx, r.bus, id)
		if lerr != nil {
			return lerr
		}
		if !st.Open() || st.Expired != nil {
			return nil // answered (or expired) meanwhile: no deadline needed
		}
		_, err = r.bus.Schedule(ctx, &exp, ScheduleSubject(id), deadline, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: st.LastSeq})
	}
	return err
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

// Validate reports what makes a request unanswerable: duplicate option
// values, a default that is not an option, control characters.
func Validate(req *events.ConfirmRequestedData) string {
	if strings.TrimSpace(req.Message) == "" {
		return "empty message"
	}
	for _, r := range req.Message {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return "message contains control characters"
		}
	}
	seen := map[string]bool{}
	for _, o := range req.Options {
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
