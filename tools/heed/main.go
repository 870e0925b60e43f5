// Command heed is heed's CLI: `heed up` runs an embedded NATS server and
// every service in one process; the other commands talk to a running heed
// over NATS like any other client.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/natsconn"
	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// Exit statuses, the same for every command (listed in heed --help).
const (
	exitOK           = 0   // done
	exitFailure      = 1   // heed could not do it: NATS unreachable, a conflict, a bug
	exitUsage        = 2   // usage or bad input: unknown flag, wrong args, invalid value, unknown id
	exitNotCompleted = 3   // the answer is no: a run ended without completing, an escalation was denied, a session may not go on (held --check)
	exitInterrupted  = 130 // interrupted (Ctrl-C) before it was done
)

const exitStatusHelp = `Exit status (every command):
  0    ok
  1    failure: heed could not do it (NATS unreachable, a conflict, a bug)
  2    usage or bad input (unknown command or flag, wrong arguments, an
       invalid value, an unknown id)
  3    the answer is no: a run ended without completing (failed, cancelled
       or abandoned), an escalation was denied (heed escalate), a session
       may not start new risky work (heed held --check)
  130  interrupted (Ctrl-C); a run goes on without its follower
Errors print one line on stderr: heed: <code>: <message>.`

// exitError carries a process exit status through cobra. With a code it
// prints as "heed: <code>: <msg>"; a usage error adds a hint how to get
// help.
type exitError struct {
	status int
	code   events.Code
	msg    string
	usage  string // the command path for "Run '<path> --help'"
}

func (e *exitError) Error() string {
	if e.code != "" {
		return string(e.code) + ": " + e.msg
	}
	return e.msg
}

// Codes of the CLI's own outcomes (not errors of a service), so that
// these lines have the one shape too: heed: <code>: <message>.
const (
	codeProjectionsDiffer events.Code = "projections_differ" // heed replay: the live buckets differ from the log
	codeDegraded          events.Code = "degraded"           // heed status: a service is not ok
)

// badInput is an error with code invalid_request and exit status 2.
func badInput(format string, args ...any) error {
	return events.Errorf(events.CodeInvalidRequest, format, args...)
}

// usageError is a mistake in how cmd was called: exit 2 and a hint.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: events.Message(err), usage: cmd.CommandPath()}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	root := newRoot()
	err := root.ExecuteContext(ctx)
	interrupted := ctx.Err() != nil
	stop()
	noColor, _ := root.PersistentFlags().GetBool("no-color")
	os.Exit(report(os.Stderr, err, interrupted, paletteFor(os.Stderr, noColor).red("heed:")))
}

// report prints err in heed's one shape and returns the exit status.
func report(w io.Writer, err error, interrupted bool, prefix string) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(w, "%s %s\n", prefix, ee.Error())
		}
		if ee.usage != "" {
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", ee.usage)
		}
		return ee.status
	}
	if interrupted && (errors.Is(err, context.Canceled) || events.CodeOf(err) == events.CodeUnavailable) {
		fmt.Fprintln(w, prefix, "interrupted")
		return exitInterrupted
	}
	code := events.CodeOf(err)
	fmt.Fprintf(w, "%s %s: %s\n", prefix, code, events.Message(err))
	if interrupted {
		return exitInterrupted
	}
	return statusOf(code)
}

// statusOf is the exit status of an error code: the caller's mistake is 2,
// anything else 1.
func statusOf(code events.Code) int {
	switch code {
	case events.CodeInvalidRequest, events.CodeNotFound, events.CodeInvalidID, events.CodeSchemaViolation, events.CodeUnknownType, events.CodeTooLarge:
		return exitUsage
	}
	return exitFailure
}

type globals struct {
	natsURL string
	// auth is how every connection authenticates (--nats-creds and the
	// rest, or their environment variables).
	auth      *natsconn.Auth
	logFormat string
	noColor   bool
	// agent, when set, is the agent this CLI acts as on a deployment that
	// keeps agents to their own runs (--as-agent).
	agent string
}

// logger is the log of a long-running command (heed up, the bridges, the
// console, the MCP server): on stderr, at level, in --log-format.
func (g *globals) logger(level string) *slog.Logger {
	return service.NewLoggerFormat(os.Stderr, level, g.logFormat)
}

// natsOptions are the credentials and TLS options of every connection
// the CLI and the programs it starts open.
func (g *globals) natsOptions() ([]nats.Option, error) {
	if g.auth == nil {
		return nil, nil
	}
	return g.auth.Options()
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
		Long: `heed puts a human (or an AI) in the loop of automated work: skills run as
event-sourced runs that pause at confirm steps, ask the right party, heal
failed steps and survive a crash of any process.

` + exitStatusHelp,
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
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if g.logFormat != "text" && g.logFormat != "json" {
			return events.Errorf(events.CodeInvalidRequest, "--log-format %q: use text or json", g.logFormat)
		}
		return nil
	}
	root.Flags().BoolP("version", "v", false, "print heed's version, commit and build date")
	root.PersistentFlags().StringVar(&g.natsURL, "nats-url", "", "NATS URL (default $HEED_NATS_URL or nats://127.0.0.1:4222)")
	g.auth = natsconn.AddFlags(root.PersistentFlags())
	for _, f := range []string{"nats-creds", "nats-nkey", "nats-password-file", "nats-ca", "nats-cert", "nats-key"} {
		_ = root.MarkPersistentFlagFilename(f)
	}
	_ = root.RegisterFlagCompletionFunc("nats-user", cobra.NoFileCompletions)
	logFormat := os.Getenv("HEED_LOG_FORMAT")
	if logFormat == "" {
		logFormat = "text"
	}
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", logFormat, "logs of heed up, the bridges, the console and the MCP server: text or json ($HEED_LOG_FORMAT)")
	_ = root.RegisterFlagCompletionFunc("log-format", completeChoices("text", "json"))
	root.PersistentFlags().StringVar(&g.agent, "as-agent", os.Getenv("HEED_AGENT"), "act as this agent where agents are kept to their own runs (heed deploy permissions --isolate-agents): run commands on heed.cmd.as.NAME.run.*, runs followed without reading the log ($HEED_AGENT)")
	_ = root.RegisterFlagCompletionFunc("as-agent", cobra.NoFileCompletions)
	root.PersistentFlags().BoolVar(&g.noColor, "no-color", false, "no colour in the output (also: NO_COLOR set, or not a terminal)")
	_ = root.RegisterFlagCompletionFunc("nats-url", cobra.NoFileCompletions)
	root.AddCommand(
		newUpCmd(g),
		newDeployCmd(g),
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
		newEscalateCmd(g),
		newHeldCmd(g),
		newEscalationCmd(g),
		newChangesCmd(g),
		newConsoleCmd(g),
		newMCPCmd(g),
		newSkillCmd(g),
		newPrefsCmd(g),
		newFixesCmd(g),
		newStatsCmd(g),
		newPatternsCmd(g),
		newDesktopCmd(g),
		newChatCmd(g),
		newVersionCmd(),
		newDocsCmd(),
	)
	root.SetHelpCommand(newHelpCmd())
	// cobra adds its completion command when it executes, after
	// strictUsage has walked the tree: add it now so that it is checked too.
	root.InitDefaultCompletionCmd()
	if comp, _, err := root.Find([]string{"completion"}); err == nil && comp != root {
		comp.Example = "  heed completion bash\n  heed completion zsh\n  heed completion fish"
		for _, sh := range comp.Commands() {
			sh.Example = "  heed completion " + sh.Name()
		}
	}
	strictUsage(root)
	return root
}

// newHelpCmd is cobra's help command, except that an unknown topic is a
// usage error (exit 2) instead of the root's help and exit 0.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help provides help for any command in the application.\nSimply type heed help [path to command] for full details.",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			var names []string
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, sub.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || cmd == nil || len(rest) > 0 {
				topic := strings.Join(args, " ")
				msg := fmt.Sprintf("unknown help topic %q", topic)
				if s := c.Root().SuggestionsFor(args[0]); len(s) > 0 {
					msg += fmt.Sprintf(" (did you mean %q?)", s[0])
				}
				return usageError(c, errors.New(msg))
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

// strictUsage makes every usage mistake under cmd an exit-2 usage error
// with a hint: a bad flag, a wrong number of arguments, an unknown
// subcommand (with cobra's "did you mean").
func strictUsage(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError(c, err) })
	cmd.SuggestionsMinimumDistance = 2
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		// A group: an argument is a subcommand it does not have.
		cmd.Args = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %q?)", s[0])
			}
			return usageError(c, errors.New(msg))
		}
		// Runnable, so that cobra checks Args (it shows a group's help
		// without checking them otherwise): no subcommand shows the help.
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	} else if cmd.Args != nil {
		cmd.Args = wrapArgs(cmd.Args)
	}
	for _, c := range cmd.Commands() {
		strictUsage(c)
	}
}

func wrapArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if err := check(c, args); err != nil {
			var ee *exitError
			if errors.As(err, &ee) {
				return err
			}
			return usageError(c, fmt.Errorf("%s (usage: %s)", strings.TrimSpace(err.Error()), c.UseLine()))
		}
		return nil
	}
}
