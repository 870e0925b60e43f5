// Command heed-confirm-router runs the confirm router on its own.
package main

import (
	"context"

	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/confirm"
	"github.com/spf13/pflag"
)

func main() {
	service.Main("confirm-router", func(fs *pflag.FlagSet) service.RunFunc {
		var cfg confirm.Config
		fs.StringVar(&cfg.RulesFile, "rules", "", "confirmation rules file (YAML)")
		fs.DurationVar(&cfg.DefaultTimeout, "default-timeout", 0, "deadline of requests that give none (default 5m)")
		fs.DurationVar(&cfg.MinTimeout, "min-timeout", 0, "shortest deadline (default 1s)")
		fs.DurationVar(&cfg.MaxTimeout, "max-timeout", 0, "longest deadline (default 24h)")
		return func(ctx context.Context, rt *service.Runtime) error { return confirm.Run(ctx, rt, cfg) }
	})
}
