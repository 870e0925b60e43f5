// Command heed-learner runs the learner service on its own.
package main

import (
	"flag"

	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/learner"
)

func main() {
	service.Main("learner", func(*flag.FlagSet) service.RunFunc { return learner.Run })
}
