// Package bridgetest starts what a bridge needs of heed in tests (the
// confirm router, the indexer, and the runner when runs are asked for) on
// a real server, and asks questions through it.
package bridgetest

import (
	"context"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/service/servicetest"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/runner"
)

// Runs also starts the runner, for tests that start runs.
type Runs struct{}

// Start runs the confirm router and the indexer (and the runner, given
// Runs) on a real server and returns a client, all stopped when the test
// ends.
func Start(t *testing.T, opts ...Runs) *heedclient.Client {
	t.Helper()
	env := eventstest.Start(t)
	StartServices(t, env, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := heedclient.Connect(ctx, env.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// StartServices is Start's services on a server the test runs itself.
func StartServices(t *testing.T, env *eventstest.Env, opts ...Runs) {
	t.Helper()
	if len(opts) > 0 {
		servicetest.Start(t, env, "runner", func(ctx context.Context, rt *service.Runtime) error { return runner.Run(ctx, rt, runner.Config{}) })
	}
	servicetest.Start(t, env, "confirm", func(ctx context.Context, rt *service.Runtime) error {
		return confirm.Run(ctx, rt, confirm.Config{})
	})
	servicetest.Start(t, env, "indexer", indexer.Run)
}

// Ask requests a confirmation (options Approve/proceed and Reject/cancel
// unless d has some; requester "test") and returns its id.
func Ask(t *testing.T, c *heedclient.Client, d events.ConfirmRequestedData) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d.Options == nil {
		d.Options = []events.Option{{Label: "Approve", Value: "proceed"}, {Label: "Reject", Value: "cancel"}}
	}
	if d.Requester == "" {
		d.Requester = "test"
	}
	rep, err := c.RequestConfirmation(ctx, command.RequestConfirmation{ConfirmRequestedData: d})
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	return rep.ID
}
