// Package heedtest starts heed's services in a test, each on its own
// connection as heed up runs them, against a real embedded server, with
// the example tools (skills/tools.yaml) and their simulated state in a
// temporary directory; and returns a client over them. It is for the
// tests of channels (the console, the MCP server) that need heed whole.
package heedtest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/service/servicetest"
	"github.com/heedhq/heed/services/changesets"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/escalator"
	"github.com/heedhq/heed/services/healer"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/learner"
	"github.com/heedhq/heed/services/runner"
)

// Start runs every service (indexer, learner, runner, healer, confirm
// router, escalator, changesets) with the example tools and returns a
// client named source. root is the repository's root. The services stop
// when the test ends.
func Start(t *testing.T, root, source string) *heedclient.Client {
	t.Helper()
	t.Setenv("HEED_SIM_STATE", t.TempDir()) // the example tools' state (the runner runs in this process)
	tools := filepath.Join(root, "skills", "tools.yaml")
	env := eventstest.Start(t)
	servicetest.Start(t, env, "indexer", indexer.Run)
	servicetest.Start(t, env, "learner", learner.Run)
	servicetest.Start(t, env, "runner", func(ctx context.Context, rt *service.Runtime) error {
		return runner.Run(ctx, rt, runner.Config{ToolsFile: tools})
	})
	servicetest.Start(t, env, "healer", func(ctx context.Context, rt *service.Runtime) error {
		return healer.Run(ctx, rt, healer.Config{ToolsFile: tools})
	})
	servicetest.Start(t, env, "confirm-router", func(ctx context.Context, rt *service.Runtime) error {
		return confirm.Run(ctx, rt, confirm.Config{})
	})
	servicetest.Start(t, env, "escalator", func(ctx context.Context, rt *service.Runtime) error {
		return escalator.Run(ctx, rt, escalator.Config{})
	})
	servicetest.Start(t, env, "changesets", func(ctx context.Context, rt *service.Runtime) error {
		return changesets.Run(ctx, rt, changesets.Config{ToolsFile: tools})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := heedclient.Connect(ctx, env.URL(), heedclient.Source(source))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
