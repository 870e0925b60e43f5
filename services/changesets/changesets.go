// Package changesets is the change-set service: agents propose the calls
// of deferred tools from one wake as a change set; people confirm, reject
// (with a reason) or defer each item from any channel, the first decision
// of an item winning; pending sets expire; each agent's decisions are kept
// for its next wake (docs/CHANGESETS.md). The runner applies confirmed
// items; this service never calls a tool.
package changesets

import (
	"context"
	"log/slog"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go/jetstream"
)

// Source is the CloudEvents source of what the service writes.
const Source = "heed/changesets"

// ConsumerName is the durable that judges decisions written straight to
// the log.
const ConsumerName = "changesets"

// Config configures the service.
type Config struct {
	// ToolsFile says which tools are deferred, how batch tools explode
	// and how items are summarised (the runner's tools file).
	ToolsFile string
	// Expiry is how long a set's items wait for decisions unless the
	// proposal says otherwise. Default events.DefaultChangeSetExpiry.
	Expiry time.Duration
	// ExpiryEvery is how often the service looks for sets past their
	// time (default 1s).
	ExpiryEvery time.Duration
	Workers     int
}

type server struct {
	cfg   Config
	tools *tool.Registry
	bus   *events.Bus
	kv    jetstream.KeyValue
	log   *slog.Logger
	open  *openIndex
	cache *setCache
	now   func() time.Time
}

// Run runs the service until ctx is done.
func Run(ctx context.Context, rt *service.Runtime, cfg Config) error {
	if cfg.Expiry <= 0 {
		cfg.Expiry = events.DefaultChangeSetExpiry
	}
	if cfg.ExpiryEvery <= 0 {
		cfg.ExpiryEvery = time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	reg := &tool.Registry{}
	if cfg.ToolsFile != "" {
		var err error
		if reg, err = tool.LoadFile(cfg.ToolsFile); err != nil {
			return err
		}
	}
	var deferred []string
	for _, n := range reg.Names() {
		if s, _ := reg.Get(n); s.Deferred() {
			deferred = append(deferred, n)
		}
	}
	rt.Log.Info("tools loaded", "file", cfg.ToolsFile, "deferred", deferred)
	for _, b := range readmodel.Specs(readmodel.ChangeSetsBucket) {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	kv, err := events.BindBucket(ctx, rt.Bus.JetStream(), readmodel.ChangeSetsBucket)
	if err != nil {
		return &events.Error{Code: events.CodeUnavailable, Message: "bucket " + readmodel.ChangeSetsBucket + ": " + err.Error(), Err: err}
	}
	s := &server{cfg: cfg, tools: reg, bus: rt.Bus, kv: kv, log: rt.Log, open: newOpenIndex(), cache: newSetCache(4096), now: time.Now}
	// The index of open sets starts from the projection, which the
	// projector then carries on from where it stopped.
	if err := s.open.load(ctx, kv); err != nil {
		return err
	}
	proj, err := events.RunProjector(ctx, rt.Bus, &Projection{OnSet: s.open.apply}, rt.Log)
	if err != nil {
		return err
	}
	cons, err := events.Consume(ctx, rt.Bus, events.ConsumerConfig{
		Name:        ConsumerName,
		Gate:        rt.Current, // a paused instance does not act on what it fetched (Runtime.Current)
		Description: "changesets: refuses, visibly, decisions written straight to the log that do not take effect",
		Filters:     []string{"heed.changeset.*.decided"},
		AckWait:     10 * time.Second,
		Workers:     cfg.Workers,
		Logger:      rt.Log,
		Middleware:  []events.Middleware{events.Retry(3, 20*time.Millisecond)},
	}, s.routes().Handle)
	if err != nil {
		proj.Stop(context.Background())
		return err
	}
	svc, err := s.serve(ctx, rt)
	if err != nil {
		return err
	}
	rt.AddCheck("changesets", func() any {
		return map[string]any{"consumer": cons.Stats(), "open_sets": s.open.count(), "deferred_tools": deferred}
	})
	go s.expireLoop(ctx)
	<-ctx.Done()
	_ = svc.Stop()
	dctx, cancel := service.DrainContext()
	defer cancel()
	cons.Stop(dctx)
	proj.Stop(dctx)
	return nil
}

func (s *server) routes() *events.Routes {
	r := events.NewRoutes()
	events.On(r, events.ChangeSetDecided, func(ctx context.Context, d *events.Delivery, dec *events.ChangeSetDecidedData) ([]events.Event, error) {
		return s.judgeDecided(ctx, d, dec)
	})
	return r
}

// judgeDecided writes heed.changeset.refused for the decisions of a
// decided event that did not take effect (judged against the set as the
// log held it just before the event). heed's own decide command writes
// only decisions that take effect, so this speaks for outside writers
// (a decided event whose source is not heed/changesets).
func (s *server) judgeDecided(ctx context.Context, d *events.Delivery, dec *events.ChangeSetDecidedData) ([]events.Event, error) {
	if d.Event.Source() == Source {
		// Written by heed.cmd.changeset.decide, which writes only what
		// takes effect. (A writer that borrows this source is judged by
		// every reader's fold all the same; it only goes without the
		// refused event that would say so.)
		return nil, nil
	}
	id := d.Event.Subject()
	st, err := changeset.LoadUntil(ctx, s.bus, id, d.Seq)
	if err != nil && events.CodeOf(err) != events.CodeNotFound {
		return nil, err
	}
	refused := changeset.Decide(st, d.Event.ID(), dec, d.Event.Time())
	if len(refused) == 0 {
		return nil, nil
	}
	ev, err := events.NewEvent(events.ChangeSetRefused, id, d.Event.ID()+"/refused", Source, events.ChangeSetRefusedData{
		DecisionID: d.Event.ID(), DecisionSeq: d.Seq, By: dec.By, Channel: dec.Channel, Refused: refused})
	if err != nil {
		return nil, err
	}
	s.log.Info("decisions refused", "changeset", id, "decision", d.Event.ID(), "by", dec.By, "refused", len(refused))
	return []events.Event{ev}, nil
}
