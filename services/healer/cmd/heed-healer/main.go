// Command heed-healer runs the healer on its own.
package main

import (
	"context"

	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/healer"
	"github.com/spf13/pflag"
)

func main() {
	service.Main("healer", func(fs *pflag.FlagSet) service.RunFunc {
		var o healer.Config
		fs.StringVar(&o.RulesFile, "config", "", "healer rules file: failure patterns and their fixes (YAML; default: the built-in rules)")
		fs.StringVar(&o.ToolsFile, "tools", "", "tools file (the runner's): fix tools run through it")
		return func(ctx context.Context, rt *service.Runtime) error { return healer.Run(ctx, rt, o) }
	})
}
