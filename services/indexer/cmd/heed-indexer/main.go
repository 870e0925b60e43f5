// Command heed-indexer runs the indexer service on its own, against the
// NATS server or cluster named by --nats-url.
package main

import (
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/indexer"
	"github.com/spf13/pflag"
)

func main() {
	service.Main("indexer", func(*pflag.FlagSet) service.RunFunc { return indexer.Run })
}
