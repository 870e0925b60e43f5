package main

import (
	"context"
	"fmt"
	"io"
)

// presenceChannel is the channel a person at this terminal is reachable
// on (the same word the prompt's answers carry).
const presenceChannel = "terminal"

// beReachable makes identity present on this terminal (client.Present)
// while a person is here to answer: the escalator offers a tier only to
// members something answers for. Not being reachable is a warning, not a
// failure: the prompt works without it.
func beReachable(ctx context.Context, c *client, identity string, warn io.Writer) (stop func()) {
	stop, err := c.Present(ctx, identity, presenceChannel)
	if err != nil {
		fmt.Fprintf(warn, "heed: warning: not reachable as %s (escalations skip you): %v\n", identity, err)
		return func() {}
	}
	return stop
}
