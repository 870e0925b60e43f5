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
	"slices"
	"sync"
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
	runs    runCache
}

// runCache keeps the runs the healer folded last, so that the next event
// of one reads only what came after it: read whole for every failure, a
// run with thousands of failed attempts cost the healer time in their
// square (2,000 in one run stalled it for minutes, and other runs' heals
// timed out). The consumer hands one run's events to one worker at a
// time, so a cached run is only ever used by one.
type runCache struct {
	mu    sync.Mutex
	runs  map[string]*runstate.Run
	order []string // oldest first
}

// maxCachedRuns bounds the cache (shared by the workers; a run of large
// outputs may hold a few MB), the oldest entry leaving first.
const maxCachedRuns = 128

// load returns run id folded at least to seq (the delivered event's).
func (c *runCache) load(ctx context.Context, bus *events.Bus, skills *skill.Cache, id string, seq uint64) (*runstate.Run, error) {
	c.mu.Lock()
	r := c.runs[id]
	c.mu.Unlock()
	if r == nil {
		r = runstate.New(id)
	}
	if err := r.CatchUp(ctx, bus, skills); err != nil {
		c.drop(id)
		return nil, err
	}
	if r.LastSeq < seq {
		// A read behind the event in hand (a replica behind): read whole
		// next time, and now.
		c.drop(id)
		return runstate.Load(ctx, bus, id, skills)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]*runstate.Run{}
	}
	if _, ok := c.runs[id]; !ok {
		c.order = append(c.order, id)
	}
	c.runs[id] = r
	for len(c.runs) > maxCachedRuns && len(c.order) > 0 {
		delete(c.runs, c.order[0])
		c.order = c.order[1:]
	}
	if len(c.order) > 4*maxCachedRuns {
		kept := c.order[:0]
		for _, k := range c.order {
			if _, ok := c.runs[k]; ok {
				kept = append(kept, k)
			}
		}
		c.order = slices.Clip(kept)
	}
	return r, nil
}

func (c *runCache) drop(id string) {
	c.mu.Lock()
	delete(c.runs, id)
	c.mu.Unlock()
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
		Gate:        rt.Current, // a paused instance does not act on what it fetched (Runtime.Current)
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
		err := h.heal(ctx, d, f)
		if err != nil {
			h.runs.drop(d.Event.Subject()) // what it holds may be ahead of the log
		}
		return nil, err
	})
	events.On(r, events.RunStepCompleted, func(ctx context.Context, d *events.Delivery, c *events.StepCompletedData) ([]events.Event, error) {
		if c.Attempt < 2 {
			return nil, nil
		}
		r, err := h.runs.load(ctx, h.bus, h.skills, d.Event.Subject(), d.Seq)
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
	r, err := h.runs.load(ctx, h.bus, h.skills, d.Event.Subject(), d.Seq)
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
