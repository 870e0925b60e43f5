// Command heed-healer runs the healer on its own.
package main

import (
	"context"
	"flag"

	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/healer"
)

func main() {
	service.Main("healer", func(fs *flag.FlagSet) service.RunFunc {
		var o healer.Options
		fs.StringVar(&o.ConfigFile, "config", "", "healer patterns file (YAML; default: built-in patterns)")
		fs.StringVar(&o.ToolsFile, "tools", "", "tools file (the runner's): fix tools run through it")
		return func(ctx context.Context, rt *service.Runtime) error { return healer.Run(ctx, rt, o) }
	})
}
