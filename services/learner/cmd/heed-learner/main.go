// Command heed-learner runs the learner service on its own.
package main

import (
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/learner"
	"github.com/spf13/pflag"
)

func main() {
	service.Main("learner", func(*pflag.FlagSet) service.RunFunc { return learner.Run })
}
