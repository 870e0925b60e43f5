package main

import (
	"context"
	"fmt"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/service"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// client is the CLI's connection to a running heed.
type client struct {
	nc  *nats.Conn
	bus *events.Bus
}

func (g *globals) connect(ctx context.Context) (*client, error) {
	url := service.NATSURL(g.natsURL)
	nc, err := nats.Connect(url, nats.Name("heed-cli"), nats.Timeout(3*time.Second))
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("cannot reach NATS at %s (is `heed up` running? set --nats-url or HEED_NATS_URL): %v", url, err), Err: err}
	}
	v, err := events.NewValidator()
	if err != nil {
		nc.Close()
		return nil, err
	}
	bus, err := events.NewBus(nc, events.NewCodec(v))
	if err != nil {
		nc.Close()
		return nil, err
	}
	if _, err := bus.JetStream().Stream(ctx, events.EventStream); err != nil {
		nc.Close()
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("no heed event stream on %s (start heed with `heed up`): %v", url, err), Err: err}
	}
	return &client{nc: nc, bus: bus}, nil
}

func (c *client) close() { _ = c.nc.Drain() }

// withClient wraps a command body that talks to a running heed: it
// connects first and closes the connection after.
func (g *globals) withClient(f func(cmd *cobra.Command, args []string, c *client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := g.connect(cmd.Context())
		if err != nil {
			return err
		}
		defer c.close()
		return f(cmd, args, c)
	}
}
