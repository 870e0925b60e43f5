// Command heed-escalator runs the escalator on its own.
package main

import (
	"context"

	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/escalator"
	"github.com/spf13/pflag"
)

func main() {
	service.Main("escalator", func(fs *pflag.FlagSet) service.RunFunc {
		var o escalator.Config
		fs.StringVar(&o.ConfigFile, "config", "", "escalation config: tiers, risk rules, auto-approve rules, routing, quorum, final action (YAML; default: the built-in config, docs/ESCALATIONS.md)")
		fs.DurationVar(&o.PresenceTimeout, "presence-timeout", escalator.DefaultPresenceTimeout, "how long to wait for a tier member's presence reply")
		return func(ctx context.Context, rt *service.Runtime) error { return escalator.Run(ctx, rt, o) }
	})
}
