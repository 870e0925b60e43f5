package indexer

import (
	"context"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/service"
)

// Buckets the indexer owns.
func Buckets() []events.BucketSpec {
	return readmodel.Specs(readmodel.IndexBucket)
}

// Run keeps the index up to date until ctx is done, then drains.
func Run(ctx context.Context, rt *service.Runtime) error {
	for _, b := range Buckets() {
		if err := events.ProvisionBucket(ctx, rt.Bus.JetStream(), rt.Topology, b); err != nil {
			return err
		}
	}
	if err := countStates(ctx, rt.Bus.JetStream(), rt.Metrics); err != nil {
		return err
	}
	c, err := events.RunProjector(ctx, rt.Bus, counted{m: rt.Metrics}, rt.Log)
	if err != nil {
		return err
	}
	rt.AddCheck("index", func() any { return c.Stats() })
	<-ctx.Done()
	dctx, cancel := service.DrainContext()
	defer cancel()
	c.Stop(dctx)
	return nil
}
