// Package learner is the learner service: it turns decisions and outcomes
// into learned state, as KV projections of the log (every one rebuilt
// identically by `heed replay`): remembered choices, and later fixes,
// failure statistics, decision statistics and usage patterns.
package learner

import (
	"context"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/service"
)

// Projections are every projection the learner keeps.
func Projections() []events.Projection {
	return []events.Projection{PrefsProjection{}, FixesProjection{}, StatsProjection{}, DecisionsProjection{}, PatternsProjection{}}
}

// Buckets are the learner's KV buckets.
func Buckets() []events.BucketSpec {
	return readmodel.Specs(readmodel.PrefsBucket, readmodel.FixesBucket, readmodel.StatsBucket, readmodel.DecisionsBucket, readmodel.PatternsBucket)
}

// Run keeps the learner's projections up to date until ctx is done.
func Run(ctx context.Context, rt *service.Runtime) error {
	for _, b := range Buckets() {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	var consumers []*events.Consumer
	for _, p := range Projections() {
		c, err := events.RunProjector(ctx, rt.Bus, p, rt.Log)
		if err != nil {
			return err
		}
		consumers = append(consumers, c)
	}
	// The checks once every projector runs: a registered check is what
	// heed up (and servicetest) take for "set up".
	for i, p := range Projections() {
		c := consumers[i]
		rt.AddCheck(p.Name(), func() any { return c.Stats() })
	}
	<-ctx.Done()
	dctx, cancel := service.DrainContext()
	defer cancel()
	for _, c := range consumers {
		c.Stop(dctx)
	}
	return nil
}
