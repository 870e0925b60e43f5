// Package healer is the healer service: it recognises tool failures,
// applies a fix (a learned one first, else a generic one), asks the runner
// to retry, hands unknown errors to the run's agent, and learns the agent's
// fix so the same failure heals itself next time. Every stage is an event in
// the run's log; the runner waits (bounded) for the healer's verdict before
// a step's on_error applies.
package healer

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
)

// Source is the CloudEvents source of the healer's events.
const Source = "heed/healer"

// ConsumerName is the healer's durable consumer.
const ConsumerName = "healer"

// Config configures the healer service.
type Config struct {
	RulesFile string // patterns; "" uses DefaultRulesYAML
	ToolsFile string // the same tools file as the runner: fix tools run through it
	Workers   int
}

type healer struct {
	decider *decider
	skills  *skill.Cache
	bus     *events.Bus
	invoker *tool.Invoker
	log     *slog.Logger
}

// Run runs the healer until ctx is done.
func Run(ctx context.Context, rt *service.Runtime, o Config) error {
	cfg, err := LoadRules(o.RulesFile)
	if err != nil {
		return err
	}
	reg := &tool.Registry{}
	if o.ToolsFile != "" {
		if reg, err = tool.LoadFile(o.ToolsFile); err != nil {
			return err
		}
	}
	for _, b := range readmodel.Specs(readmodel.FixesBucket) {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	fixes, err := events.WatchBucket(ctx, rt.Bus.JetStream(), readmodel.FixesBucket)
	if err != nil {
		return err
	}
	defer fixes.Stop()
	// Failures waiting in the log are handled at once: the learned fixes must
	// be loaded first, or a fix known for them is passed over.
	select {
	case <-fixes.Ready():
	case <-ctx.Done():
		return nil
	}
	h := &healer{skills: skill.NewCache(), decider: &decider{rules: cfg, tools: reg, fixes: bucketFixes{fixes}}, bus: rt.Bus, invoker: &tool.Invoker{Registry: reg, Requester: rt.Conn}, log: rt.Log}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	cons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        ConsumerName,
		Description: "healer: classifies tool failures, applies fixes, learns agents' fixes",
		Filters:     []string{"heed.run.*.step.failed", "heed.run.*.step.completed"},
		AckWait:     30 * time.Second,
		Workers:     o.Workers,
		Logger:      rt.Log,
		Middleware:  []events.Middleware{events.Retry(3, 20*time.Millisecond)},
	}, h.routes().Handle)
	if err != nil {
		return err
	}
	svc, err := (&fixCommands{bus: rt.Bus, tools: reg, now: time.Now}).serve(ctx, rt)
	if err != nil {
		return err
	}
	rt.AddCheck("healer", func() any { return cons.Stats() })
	<-ctx.Done()
	_ = svc.Stop()
	dctx, cancel := service.DrainContext()
	defer cancel()
	cons.Stop(dctx)
	return nil
}

// routes are the healer's typed handlers: a tool step's failure is
// healed, a later attempt's success may teach a fix.
func (h *healer) routes() *events.Routes {
	r := events.NewRoutes()
	events.On(r, events.RunStepFailed, func(ctx context.Context, d *events.Delivery, f *events.StepFailedData) ([]events.Event, error) {
		if f.Tool == "" {
			return nil, nil // compute and confirm steps are not tool failures
		}
		return nil, h.heal(ctx, d, f)
	})
	events.On(r, events.RunStepCompleted, func(ctx context.Context, d *events.Delivery, c *events.StepCompletedData) ([]events.Event, error) {
		if c.Attempt < 2 {
			return nil, nil
		}
		r, err := runstate.Load(ctx, h.bus, d.Event.Subject(), h.skills)
		if err != nil {
			return nil, err
		}
		return learn(r, c, d.Event.ID(), time.Now().UTC())
	})
	return r
}

// heal works on one failed attempt: it decides, publishes, runs the fix
// tool a decision asks for, records its result and decides again, until
// healing has nothing more to do for now.
func (h *healer) heal(ctx context.Context, d *events.Delivery, f *events.StepFailedData) error {
	r, err := runstate.Load(ctx, h.bus, d.Event.Subject(), h.skills)
	if err != nil {
		return err
	}
	for {
		dec := h.decider.heal(r, f, time.Now().UTC())
		if err := h.bus.PublishAll(ctx, dec.Events); err != nil {
			return err
		}
		if dec.RunFix == nil {
			return nil
		}
		stop := heartbeat(d)
		res := h.invoker.Invoke(ctx, dec.RunFix.Call)
		stop()
		ev, err := fixApplied(r, f, dec.RunFix, res, time.Now().UTC())
		if err != nil {
			return err
		}
		if err := h.bus.PublishAll(ctx, []events.Event{ev}); err != nil {
			return err
		}
		_ = r.Apply(&ev, 0, nil)
	}
}

// bucketFixes is the learned fixes as the learner's bucket holds them,
// watched into memory.
type bucketFixes struct{ cache *events.BucketCache }

func (b bucketFixes) ForTool(toolName string) []readmodel.Fix {
	var out []readmodel.Fix
	b.cache.Each(func(_ string, v json.RawMessage) bool {
		var fx readmodel.Fix
		if json.Unmarshal(v, &fx) == nil && fx.Tool == toolName {
			out = append(out, fx)
		}
		return true
	})
	return out
}

func heartbeat(d *events.Delivery) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = d.InProgress()
			}
		}
	}()
	return func() { close(stop) }
}
