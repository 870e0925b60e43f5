package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/runner"
	"github.com/heedhq/heed/services/runner/skill"
	"github.com/heedhq/heed/services/runner/tool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

func newContinueCmd(g *globals) *cobra.Command {
	var choice, reason, by string
	cmd := &cobra.Command{
		Use:   "continue RUN-ID --choice VALUE",
		Short: "Continue a paused run: answer its confirmation (as its agent) or resume it",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			if by == "" {
				by = whoami()
			}
			var reply runner.Reply
			if err := c.request(cmd.Context(), runner.SubjectContinue, runner.ContinueRequest{RunID: args[0], Choice: choice, Reason: reason, By: by}, &reply); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s continues (%s)\n", reply.RunID, choice)
			return nil
		}),
	}
	cmd.Flags().StringVar(&choice, "choice", "", "the option value to continue with")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded on the answer)")
	cmd.Flags().StringVar(&by, "by", "", "who decides (default the current user)")
	return cmd
}

func newRetryCmd(g *globals) *cobra.Command {
	var step, reason string
	var argPairs []string
	cmd := &cobra.Command{
		Use:   "retry RUN-ID [--step NAME] [--arg key=value]...",
		Short: "Retry a failed step with corrected args (merged over the failed attempt's)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := parseKV(argPairs, true)
			if err != nil {
				return err
			}
			c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.close()
			var reply runner.Reply
			if err := c.request(cmd.Context(), runner.SubjectRetry, runner.RetryRequest{RunID: args[0], Step: step, Args: a, Reason: reason, By: whoami()}, &reply); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s: retrying\n", reply.RunID)
			return nil
		},
	}
	cmd.Flags().StringVar(&step, "step", "", "the failed step (default: the first failed step)")
	cmd.Flags().StringArrayVar(&argPairs, "arg", nil, "corrected arg as key=value (JSON values allowed; repeatable)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the log)")
	return cmd
}

func newCancelCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel RUN-ID",
		Short: "Cancel a run (a running tool is stopped)",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			var reply runner.Reply
			if err := c.request(cmd.Context(), runner.SubjectCancel, runner.CancelRequest{RunID: args[0], Reason: reason, By: whoami()}, &reply); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s cancelled\n", reply.RunID)
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the log)")
	return cmd
}

// indexEntries lists index entries of one kind, newest first.
func indexEntries(cmd *cobra.Command, c *client, kind string) ([]indexer.Entry, error) {
	ctx := cmd.Context()
	kv, err := c.bus.JetStream().KeyValue(ctx, indexer.Bucket)
	if err != nil {
		return nil, fmt.Errorf("index bucket: %w", err)
	}
	lister, err := kv.ListKeysFiltered(ctx, kind+".>")
	if err != nil {
		return nil, err
	}
	var out []indexer.Entry
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var env struct {
			Deleted bool          `json:"deleted"`
			Value   indexer.Entry `json:"value"`
		}
		if json.Unmarshal(e.Value(), &env) == nil && !env.Deleted {
			out = append(out, env.Value)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Last.Time.After(out[j].Last.Time) })
	return out, nil
}

func newRunsCmd(g *globals) *cobra.Command {
	var limit int
	var status string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List recent runs and their state",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			entries, err := indexEntries(cmd, c, "run")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var shown []indexer.Entry
			for _, e := range entries {
				if status != "" && e.Status != status {
					continue
				}
				shown = append(shown, e)
				if len(shown) == limit {
					break
				}
			}
			if asJSON {
				printJSON(out, shown)
				return nil
			}
			fmt.Fprintf(out, "%-28s %-24s %-10s %-22s %6s  %s\n", "RUN", "SKILL", "STATUS", "STEP", "EVENTS", "UPDATED")
			for _, e := range shown {
				fmt.Fprintf(out, "%-28s %-24s %-10s %-22s %6d  %s\n", e.ID, truncate(e.Skill, 24), e.Status, truncate(e.Step, 22), e.Count, e.Last.Time.Local().Format("2006-01-02 15:04:05"))
			}
			if len(shown) == 0 {
				fmt.Fprintln(out, "(no runs)")
			}
			return nil
		}),
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "how many")
	cmd.Flags().StringVar(&status, "status", "", "only runs in this state (running, paused, completed, failed, cancelled)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	return cmd
}

func newConfirmCmd(g *globals) *cobra.Command {
	var yes, asJSON bool
	cmd := &cobra.Command{
		Use:   "confirm [CONFIRM-ID]",
		Short: "Answer a confirmation at this terminal (the oldest waiting one, or the next to arrive)",
		Long: `Ask the person at this terminal: the question, numbered options, a live
countdown. Enter takes the default, a digit picks that option, 'a' remembers
the choice for this skill step, Ctrl-C cancels. An answer from any other
channel ends the prompt too. Without a terminal it fails at once (exit 2)
unless --yes answers with the proceed option.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			id := ""
			if len(args) == 1 {
				id = args[0]
			} else if id, err = nextPending(cmd, c); err != nil {
				return err
			}
			st, err := confirm.Load(ctx, c.bus, id)
			if err != nil {
				return err
			}
			var res promptResult
			if yes {
				start := time.Now()
				choice := confirm.ProceedChoice(st.Request)
				_, err = confirm.Answer(ctx, c.bus, "heed/cli", id, events.ConfirmAnsweredData{Choice: choice, Method: events.MethodOverride, By: whoami(), Channel: "cli", Reason: "--yes"})
				res = promptResult{Choice: choice, Method: events.MethodOverride, By: whoami(), Duration: time.Since(start)}
			} else {
				res, err = prompt(ctx, c, st, os.Stdin, cmd.OutOrStdout())
				if errors.Is(err, errNoTerminal) {
					return &exitError{code: 2, msg: fmt.Sprintf("%v: answer with `heed confirm answer %s <choice>`, or pass --yes to proceed", err, id)}
				}
			}
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), res)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "→ %s (%s by %s, %s)\n", res.Choice, res.Method, res.By, res.Duration.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "answer with the proceed option (override) instead of asking")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result (choice, method, duration) as JSON")
	var reason, by string
	answer := &cobra.Command{
		Use:   "answer CONFIRM-ID CHOICE",
		Short: "Answer a confirmation (the first answer wins; later ones are refused)",
		Args:  cobra.ExactArgs(2),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			if by == "" {
				by = whoami()
			}
			st, err := confirm.Answer(cmd.Context(), c.bus, "heed/cli", args[0], events.ConfirmAnsweredData{Choice: args[1], Method: events.MethodUser, By: by, Channel: "cli", Reason: reason})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "answered %s: %s\n", st.ID, args[1])
			return nil
		}),
	}
	answer.Flags().StringVar(&reason, "reason", "", "why (recorded on the answer)")
	answer.Flags().StringVar(&by, "by", "", "who answers (default the current user)")
	show := &cobra.Command{
		Use:   "show CONFIRM-ID",
		Short: "Show a confirmation: the question, its options and its answer",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			st, err := confirm.Load(cmd.Context(), c.bus, args[0])
			if err != nil {
				return err
			}
			printConfirm(cmd.OutOrStdout(), st)
			return nil
		}),
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List confirmations waiting for an answer",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			entries, err := indexEntries(cmd, c, "confirm")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			n := 0
			for _, e := range entries {
				if e.Status != "pending" {
					continue
				}
				n++
				fmt.Fprintf(out, "%-40s run %-28s since %s\n", e.ID, e.RunID, e.First.Time.Local().Format("15:04:05"))
			}
			if n == 0 {
				fmt.Fprintln(out, "(nothing waiting)")
			}
			return nil
		}),
	}
	cmd.AddCommand(answer, show, list)
	return cmd
}

// nextPending returns the oldest confirmation waiting for an answer, or
// waits for the next request.
func nextPending(cmd *cobra.Command, c *client) (string, error) {
	ctx := cmd.Context()
	reqs := make(chan *nats.Msg, 16)
	sub, err := c.nc.ChanSubscribe("heed.confirm.*.requested", reqs)
	if err != nil {
		return "", err
	}
	defer func() { _ = sub.Unsubscribe() }()
	entries, err := indexEntries(cmd, c, "confirm")
	if err != nil {
		return "", err
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Status == "pending" || entries[i].Status == "delegated" {
			return entries[i].ID, nil
		}
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "waiting for a confirmation request (Ctrl-C to stop)")
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case m := <-reqs:
			if _, id, _, ok := events.ParseSubject(m.Subject); ok {
				time.Sleep(50 * time.Millisecond) // let the router's fast layers answer first
				if st, err := confirm.Load(ctx, c.bus, id); err == nil && st.Open() {
					return id, nil
				}
			}
		}
	}
}

func printConfirm(w writer, st *confirm.State) {
	r := st.Request
	if r.Title != "" {
		fmt.Fprintf(w, "%s\n", r.Title)
	}
	fmt.Fprintf(w, "%s\n", strings.TrimRight(r.Message, "\n"))
	for i, o := range r.Options {
		def := ""
		if o.Value == r.Default {
			def = " (default)"
		}
		desc := ""
		if o.Description != "" {
			desc = " — " + o.Description
		}
		fmt.Fprintf(w, "  %d) %s [%s]%s%s\n", i+1, o.Label, o.Value, def, desc)
	}
	if r.RunID != "" {
		fmt.Fprintf(w, "run %s, skill %s, step %s\n", r.RunID, r.Skill, r.Step)
	}
	switch {
	case st.Answer != nil:
		fmt.Fprintf(w, "answered %q by %s (%s) at %s\n", st.Answer.Choice, st.Answer.By, st.Answer.Method, st.AnsweredAt.Local().Format(time.DateTime))
	case st.Expired != nil:
		fmt.Fprintf(w, "expired at %s; default %q applies\n", st.Expired.Deadline.Local().Format(time.DateTime), st.Expired.Default)
	default:
		fmt.Fprintf(w, "waiting since %s\n", st.RequestedAt.Local().Format(time.DateTime))
	}
}

func newSkillCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "skill", Short: "Work with skill files"}
	var toolsFile string
	lint := &cobra.Command{
		Use:   "lint FILE...",
		Short: "Check skills: every error with file:line, before anything runs",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var reg *tool.Registry
			if toolsFile != "" {
				r, err := tool.LoadFile(toolsFile)
				if err != nil {
					return &exitError{code: 1, msg: err.Error()}
				}
				reg = r
			}
			out := cmd.OutOrStdout()
			bad := 0
			for _, f := range args {
				src, err := readFile(f)
				if err != nil {
					fmt.Fprintf(out, "%s: %v\n", f, err)
					bad++
					continue
				}
				sk, err := skill.Load(f, src)
				if err != nil {
					fmt.Fprintln(out, err)
					bad++
					continue
				}
				if reg != nil {
					var missing []string
					for _, st := range sk.Steps {
						if st.Kind == skill.KindTool {
							if _, ok := reg.Get(st.Tool); !ok {
								missing = append(missing, fmt.Sprintf("%s: step %q: unknown tool %q (not in %s)", st.Pos, st.Name, st.Tool, toolsFile))
							}
						}
					}
					if len(missing) > 0 {
						fmt.Fprintln(out, strings.Join(missing, "\n"))
						bad++
						continue
					}
				}
				fmt.Fprintf(out, "%s: ok (skill %s, %d steps)\n", f, sk.Name, len(sk.Steps))
			}
			if bad > 0 {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	lint.Flags().StringVar(&toolsFile, "tools", "", "also check tool names against this tools file")
	cmd.AddCommand(lint)
	return cmd
}

var _ = jetstream.DeliverAllPolicy
