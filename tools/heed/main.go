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
		noColor, _ := root.PersistentFlags().GetBool("no-color")
		prefix := paletteFor(os.Stderr, noColor).red("heed:")
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, prefix, ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, prefix, err)
		if c := events.CodeOf(err); c == events.CodeInvalidRequest || c == events.CodeNotFound {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type globals struct {
	natsURL string
	noColor bool
}

// palette is the colouring for cmd's standard output.
func (g *globals) palette(cmd *cobra.Command) palette {
	return paletteFor(cmd.OutOrStdout(), g.noColor)
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "heed",
		Short: "heed puts a human (or an AI) in the loop of automated work",
		Example: `  heed up --data .heed --tools skills/tools.yaml
  heed run skills/release_prod.yaml -i commit_sha=0123456789abcdef0123456789abcdef01234567
  heed runs --status paused
  heed confirm list
  heed audit <run-id>`,
		Version:       currentBuild().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().BoolP("version", "v", false, "print heed's version, commit and build date")
	root.PersistentFlags().StringVar(&g.natsURL, "nats-url", "", "NATS URL (default $HEED_NATS_URL or nats://127.0.0.1:4222)")
	root.PersistentFlags().BoolVar(&g.noColor, "no-color", false, "no colour in the output (also: NO_COLOR set, or not a terminal)")
	_ = root.RegisterFlagCompletionFunc("nats-url", cobra.NoFileCompletions)
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
		newSkillCmd(g),
		newPrefsCmd(g),
		newFixesCmd(g),
		newStatsCmd(g),
		newPatternsCmd(g),
		newVersionCmd(),
		newDocsCmd(),
	)
	return root
}
