// Command heed-changesets runs the change-set service on its own.
package main

import (
	"context"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/changesets"
	"github.com/spf13/pflag"
)

func main() {
	service.Main("changesets", func(fs *pflag.FlagSet) service.RunFunc {
		var o changesets.Config
		fs.StringVar(&o.ToolsFile, "tools", "", "tools file: which tools are deferred, how batch tools explode, item summaries (the runner's; docs/CHANGESETS.md)")
		fs.DurationVar(&o.Expiry, "expiry", events.DefaultChangeSetExpiry, "how long a change set's items wait for decisions before they expire")
		return func(ctx context.Context, rt *service.Runtime) error { return changesets.Run(ctx, rt, o) }
	})
}
