// Command heed-indexer runs the indexer service on its own, against the
// NATS server or cluster named by --nats-url.
package main

import (
	"flag"

	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/indexer"
)

func main() {
	service.Main("indexer", func(*flag.FlagSet) service.RunFunc { return indexer.Run })
}
