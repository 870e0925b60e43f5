package main

import (
	"context"

	heedclient "github.com/heedhq/heed/client"
	"github.com/spf13/cobra"
)

// client is the CLI's connection to a running heed: the client package,
// as every channel uses it.
type client struct{ *heedclient.Client }

func (g *globals) connect(ctx context.Context, opts ...heedclient.Option) (*client, error) {
	natsOpts, err := g.natsOptions()
	if err != nil {
		return nil, err
	}
	base := []heedclient.Option{heedclient.Name("heed-cli"), heedclient.Source("heed/cli"), heedclient.NATSOptions(natsOpts)}
	if g.agent != "" {
		base = append(base, heedclient.Agent(g.agent))
	}
	c, err := heedclient.Connect(ctx, g.natsURL, append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	return &client{c}, nil
}

func (c *client) close() { c.Close() }

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
