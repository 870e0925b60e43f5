// Command heed is heed's CLI: `heed up` runs an embedded NATS server and
// every service in one process; the other commands talk to a running heed
// over NATS like any other client.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/heedhq/heed/events"
	"github.com/spf13/cobra"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	root := newRoot()
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, "heed:", ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "heed:", err)
		if c := events.CodeOf(err); c == events.CodeInvalidRequest || c == events.CodeNotFound {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type globals struct {
	natsURL string
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "heed",
		Short:         "heed puts a human (or an AI) in the loop of automated work",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.natsURL, "nats-url", "", "NATS URL (default $HEED_NATS_URL or nats://127.0.0.1:4222)")
	root.AddCommand(
		newUpCmd(g),
		newEventsCmd(g),
		newAuditCmd(g),
		newReplayCmd(g),
		newRunCmd(g),
		newContinueCmd(g),
		newRetryCmd(g),
		newCancelCmd(g),
		newRunsCmd(g),
		newStatusCmd(g),
		newConfirmCmd(g),
		newSkillCmd(),
		newPrefsCmd(g),
		newFixesCmd(g),
		newStatsCmd(g),
	)
	return root
}
