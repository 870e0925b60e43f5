// Package runner is the skill runner service: it runs skills as
// event-sourced runs that pause at confirm steps, resume on an answer,
// retry failed steps and survive the crash of any process. Every run is a
// sequence of events on JetStream; the runner keeps nothing the log cannot
// give back.
package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go/micro"
)

// Config configures the runner.
type Config struct {
	// ToolsFile is the tools file (see docs/SKILLS.md). Without one, only
	// skills without tool steps can run.
	ToolsFile string
	// Workers is how many goroutines drive runs (runs are partitioned).
	Workers int
	// AckWait is how long a delivery may go without a heartbeat before the
	// server redelivers it: after a crash, runs resume within about this.
	AckWait time.Duration
	// MaxInFlight bounds unacknowledged deliveries (≈ concurrent tool calls).
	MaxInFlight int
	// HealWait is how long a failed tool step waits for the healer's first
	// verdict before on_error applies (the healer may be down). Negative
	// disables healing. Default 3s.
	HealWait time.Duration
	// HealTimeout bounds a heal the healer took up. Default 2m.
	HealTimeout time.Duration
	// LagWait bounds how long a command waits for the log to show what its
	// caller already saw (a pause, a failure). Default 1s.
	LagWait time.Duration
	// SweepEvery is how often the runner reconciles the runs that have
	// been quiet for SweepQuiet (sweep.go). Defaults 15s and 30s; a
	// negative SweepEvery turns the sweep off.
	SweepEvery, SweepQuiet time.Duration
	// AbandonAfter is how long a run (any driver, an outside agent's too)
	// may have no event before the sweep ends it with heed.run.abandoned.
	// Default DefaultAbandonAfter; negative never abandons a run.
	AbandonAfter time.Duration
	// ChangeSetExpiry is how long the items a run queued for review
	// (its calls of deferred tools) wait for decisions. Default
	// events.DefaultChangeSetExpiry.
	ChangeSetExpiry time.Duration
	// MaxWaiting is how many runs waiting for an answer stay in memory
	// (those that paused last); older ones are read from the log again
	// when their answer comes. Default 1000.
	MaxWaiting int
}

// DefaultAbandonAfter is twice the longest confirmation deadline (24h), so
// a run waiting for an answer is answered (by its deadline's default, at
// the latest) long before it could count as abandoned.
const DefaultAbandonAfter = 48 * time.Hour

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.AckWait <= 0 {
		c.AckWait = 5 * time.Second
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 20000
	}
	if c.HealWait == 0 {
		c.HealWait = 3 * time.Second
	}
	if c.HealTimeout <= 0 {
		c.HealTimeout = 2 * time.Minute
	}
	if c.LagWait <= 0 {
		c.LagWait = time.Second
	}
	if c.SweepEvery == 0 {
		c.SweepEvery = 15 * time.Second
	}
	if c.SweepQuiet <= 0 {
		c.SweepQuiet = 30 * time.Second
	}
	if c.AbandonAfter == 0 {
		c.AbandonAfter = DefaultAbandonAfter
	}
}

// ConsumerName is the runner's durable consumer.
const ConsumerName = "runner"

// Run runs the runner until ctx is done, then drains.
func Run(ctx context.Context, rt *service.Runtime, cfg Config) error {
	cfg.defaults()
	reg := &tool.Registry{}
	if cfg.ToolsFile != "" {
		var err error
		if reg, err = tool.LoadFile(cfg.ToolsFile); err != nil {
			return err
		}
		rt.Log.Info("tools loaded", "file", cfg.ToolsFile, "tools", reg.Names())
	}
	eng := newEngine(rt.Bus, &tool.Invoker{Registry: reg, Requester: rt.Conn}, rt.Log, cfg.AckWait)
	eng.current = rt.Current
	callCtx, stopCalls := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCalls()
	eng.callCtx = callCtx
	if cfg.MaxWaiting > 0 {
		eng.maxWaiting = cfg.MaxWaiting
	}
	eng.metrics = rt.Metrics
	eng.decider.healWait, eng.decider.healTimeout = max(cfg.HealWait, 0), cfg.HealTimeout
	eng.decider.changeSetExpiry = cfg.ChangeSetExpiry
	// Learned state the runner shows: known issues and pattern warnings.
	for _, b := range readmodel.Specs(readmodel.FixesBucket, readmodel.PatternsBucket) {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	fixes, err := events.WatchBucket(ctx, rt.Bus.JetStream(), readmodel.FixesBucket)
	if err != nil {
		return err
	}
	defer fixes.Stop()
	// The patterns alone (their ids are one token): the bucket also
	// holds a key per run with calls in flight and one per tool, which the
	// runner never reads and which would otherwise be decoded at every
	// change and visited by every tool call's look for warnings.
	patterns, err := events.WatchBucket(ctx, rt.Bus.JetStream(), readmodel.PatternsBucket, readmodel.PatternKeys)
	if err != nil {
		return err
	}
	defer patterns.Stop()
	eng.decider.learned = bucketLearned{fixes: fixes, patterns: patterns}
	cons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name: ConsumerName,
		Gate: rt.Current, // a paused instance does not act on what it fetched (Runtime.Current)
		// A run's later events may be handled before the one held back
		// comes back: its cached state is read again from the log.
		HeldBack: func(subject string) {
			if kind, id, _, ok := events.ParseSubject(subject); ok && kind == "run" {
				eng.forget(id)
			}
		},
		Description: "skill runner: drives runs from their events",
		Filters:     []string{"heed.run.>", "heed.confirm.*.answered"},
		// The server filters by both subjects (no wider ServerFilter): a
		// consumer whose filter covers heed.schedule.> takes part in the
		// purge that every deadline's schedule makes (the server copies its
		// pending state each time: 6% of heed up's CPU while opening runs),
		// and is handed every other kind of event only to skip it. Measured
		// against "heed.>" (BENCHMARKS.md, "Session 2026-11-25d").
		AckWait:       cfg.AckWait,
		MaxAckPending: cfg.MaxInFlight,
		Workers:       cfg.Workers,
		PartitionKey:  runIDOf,
		Logger:        rt.Log,
		// A blip of NATS costs a retry in the process, not a redelivery:
		// the decision is level-triggered, so deciding again is safe.
		Middleware: []events.Middleware{events.Retry(3, 20*time.Millisecond)},
	}, eng.handle)
	if err != nil {
		return err
	}
	// Confirmed change-set items are applied with the same tools.
	apl := &applier{sets: changeset.NewCache(2048), bus: rt.Bus, invoker: eng.invoker, ackWait: cfg.AckWait, log: rt.Log}
	csCons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        ChangeSetConsumerName,
		Gate:        rt.Current, // a paused instance does not act on what it fetched (Runtime.Current)
		Description: "skill runner: applies the confirmed items of change sets",
		Filters:     []string{"heed.changeset.*.decided"},
		AckWait:     cfg.AckWait,
		Workers:     cfg.Workers,
		Logger:      rt.Log,
		Middleware:  []events.Middleware{events.Retry(3, 20*time.Millisecond)},
	}, apl.routes().Handle)
	if err != nil {
		cons.Stop(context.Background())
		return err
	}
	svc, err := micro.AddService(rt.Conn, micro.Config{Name: "heed-runner-commands", Version: service.Version, Description: "heed skill runner commands: start, continue, retry, cancel"})
	if err != nil {
		return fmt.Errorf("register commands: %w", err)
	}
	if err := (&commands{e: eng, tools: reg, lagWait: cfg.LagWait, largeSlot: make(chan struct{}, 1), current: rt.Current}).register(ctx, svc); err != nil {
		return fmt.Errorf("register commands: %w", err)
	}
	if cfg.SweepEvery > 0 {
		go eng.sweepLoop(ctx, cfg.SweepEvery, cfg.SweepQuiet)
		if cfg.AbandonAfter > 0 {
			go eng.abandonLoop(ctx, abandonEvery(cfg.SweepEvery, cfg.AbandonAfter), cfg.AbandonAfter)
		}
	}
	rt.AddCheck("runner", func() any {
		eng.mu.Lock()
		defer eng.mu.Unlock()
		return map[string]any{"consumer": cons.Stats(), "changeset_consumer": csCons.Stats(), "runs_cached": len(eng.runs), "tool_calls_in_flight": len(eng.inflight), "tools": reg.Names(), "tools_file": reg.File}
	})
	<-ctx.Done()
	_ = svc.Stop()
	dctx, cancel := service.DrainContext()
	defer cancel()
	cons.Stop(dctx)
	csCons.Stop(dctx)
	// The calls the sweep made finish too, as held ones do (their results
	// stored), within the same drain.
	done := make(chan struct{})
	go func() { eng.detached.Wait(); close(done) }()
	select {
	case <-done:
	case <-dctx.Done():
		rt.Log.Warn("stop: calls the sweep made are still running; the next runner's sweep makes them again")
	}
	stopCalls()
	return nil
}
