// Command heed-runner runs the skill runner on its own, against the NATS
// server or cluster named by --nats-url.
package main

import (
	"context"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/runner"
	"github.com/spf13/pflag"
)

func main() {
	service.Main("runner", func(fs *pflag.FlagSet) service.RunFunc {
		var cfg runner.Config
		fs.StringVar(&cfg.ToolsFile, "tools", "", "tools file (YAML)")
		fs.IntVar(&cfg.Workers, "workers", 16, "goroutines driving runs")
		fs.DurationVar(&cfg.SweepEvery, "sweep-every", 15*time.Second, "how often to reconcile runs that have been quiet (docs/ARCHITECTURE.md, the sweep)")
		fs.DurationVar(&cfg.SweepQuiet, "sweep-quiet", 30*time.Second, "how long a run must have been quiet before the sweep reconciles it")
		fs.DurationVar(&cfg.AbandonAfter, "abandon-after", runner.DefaultAbandonAfter, "end a run with no event for this long as abandoned (any driver; negative: never)")
		fs.DurationVar(&cfg.ChangeSetExpiry, "changeset-expiry", events.DefaultChangeSetExpiry, "how long the items a run queued for review (calls of deferred tools) wait for decisions")
		return func(ctx context.Context, rt *service.Runtime) error { return runner.Run(ctx, rt, cfg) }
	})
}
