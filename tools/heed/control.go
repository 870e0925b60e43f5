package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/heedhq/heed/tools/bridge"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/heedhq/heed/lib/tool"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newContinueCmd(g *globals) *cobra.Command {
	var choice, reason, by string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "continue RUN-ID --choice VALUE",
		Short: "Continue a paused run: answer its confirmation (as its agent) or resume it",
		Example: `  heed continue 01kmz3h7q8r2v5x9c4d6e8f0gt --choice proceed
  heed continue 01kmz3h7q8r2v5x9c4d6e8f0gt --choice cancel --reason "wrong commit"`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeRuns("paused"),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			if by == "" {
				by = whoami()
			}
			reply, err := c.Continue(cmd.Context(), command.ContinueRun{RunID: args[0], Choice: choice, Reason: reason, By: by})
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), reply)
				return nil
			}
			if choice == "" {
				// No choice: a step handed to the agent lets on_error apply.
				fmt.Fprintf(cmd.OutOrStdout(), "run %s continues (its failed step's on_error applies)\n", reply.RunID)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s continues (%s)\n", reply.RunID, choice)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	cmd.Flags().StringVar(&choice, "choice", "", "the option value to continue with")
	cmd.PreRunE = idArg("run")
	_ = cmd.RegisterFlagCompletionFunc("choice", g.completeRunChoices())
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded on the answer)")
	cmd.Flags().StringVar(&by, "by", "", "who decides (default the current user)")
	return cmd
}

func newRetryCmd(g *globals) *cobra.Command {
	var step, reason string
	var argPairs []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "retry RUN-ID [--step NAME] [--arg key=value]...",
		Short: "Retry a failed step with corrected args (merged over the failed attempt's)",
		Example: `  heed retry 01kmz3h7q8r2v5x9c4d6e8f0gt
  heed retry 01kmz3h7q8r2v5x9c4d6e8f0gt --step check_image \
    --arg tag=0123456789abcdef0123456789abcdef01234567 --reason "the full SHA"
  heed retry 01kmz3h7q8r2v5x9c4d6e8f0gt --arg replicas=2 --json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeRuns("failed", "paused"),
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
			reply, err := c.Retry(cmd.Context(), command.RetryStep{RunID: args[0], Step: step, Args: a, Reason: reason, By: whoami()})
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), reply)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s: retrying\n", reply.RunID)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	cmd.Flags().StringVar(&step, "step", "", "the failed step (default: the first failed step)")
	cmd.PreRunE = idArg("run")
	cmd.Flags().StringArrayVar(&argPairs, "arg", nil, "corrected arg as key=value (JSON values allowed; repeatable)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the log)")
	return cmd
}

func newCancelCmd(g *globals) *cobra.Command {
	var reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel RUN-ID",
		Short: "Cancel a run (a running tool is stopped)",
		Example: `  heed cancel 01kmz3h7q8r2v5x9c4d6e8f0gt --reason "superseded by a newer release"
  heed runs --status paused --json | jq -r '.[].id' | xargs -n1 heed cancel`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeRuns("running", "paused", "requested"),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			reply, err := c.Cancel(cmd.Context(), command.CancelRun{RunID: args[0], Reason: reason, By: whoami()})
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), reply)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s cancelled\n", reply.RunID)
			return nil
		}),
	}
	cmd.PreRunE = idArg("run")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the log)")
	return cmd
}

func newRunsCmd(g *globals) *cobra.Command {
	var limit int
	var status string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List recent runs and their state",
		Example: `  heed runs
  heed runs --status failed -n 5
  heed runs --json | jq -r '.[] | select(.status == "paused") | .id'`,
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if limit < 0 {
				return badInput("--limit %d: use a positive number, or 0 for every run", limit)
			}
			if status != "" {
				return oneOf("--status", status, runStatuses)
			}
			return nil
		},
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			entries, err := c.Index(cmd.Context(), "run")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var shown []readmodel.IndexEntry
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
				if shown == nil {
					shown = []readmodel.IndexEntry{}
				}
				printJSON(out, shown)
				return nil
			}
			if len(shown) == 0 {
				fmt.Fprintln(out, "(no runs)")
				return nil
			}
			pal := g.palette(cmd)
			t := newTable(out)
			t.row(pal.bold("RUN"), pal.bold("SKILL"), pal.bold("STATUS"), pal.bold("STEP"), pal.bold("EVENTS"), pal.bold("UPDATED"))
			for _, e := range shown {
				t.row(e.ID, truncate(e.Skill, 32), pal.status(e.Status), truncate(e.Step, 32), fmt.Sprint(e.Count), e.Last.Time.Local().Format("2006-01-02 15:04:05"))
			}
			t.Flush()
			return nil
		}),
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "how many (0: every run)")
	cmd.Flags().StringVar(&status, "status", "", "only runs in this state ("+strings.Join(runStatuses, ", ")+")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	_ = cmd.RegisterFlagCompletionFunc("status", completeChoices(runStatuses...))
	return cmd
}

// runStatuses are the states a run can be in (the index's words).
func newConfirmCmd(g *globals) *cobra.Command {
	var yes, asJSON bool
	var as string
	cmd := &cobra.Command{
		Use:   "confirm [CONFIRM-ID]",
		Short: "Answer a confirmation at this terminal (the oldest waiting one you may answer, or the next to arrive)",
		Long: `Ask the person at this terminal: the question, numbered options, a live
countdown. Enter takes the default, a digit picks that option, 'a' remembers
the choice for this skill step, Ctrl-C cancels. An answer from any other
channel ends the prompt too. Without a terminal it fails at once (exit 2)
unless --yes answers with the proceed option.`,
		Example: `  heed confirm                      # the oldest waiting confirmation, or the next one
  heed confirm 01kmz3h7q8r2v5x9c4d6e8f0gt-s1-a1
  heed confirm --yes --json         # answer the next one with proceed, print the result`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: g.completeConfirmations(),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if !yes && !term.IsTerminal(int(os.Stdin.Fd())) {
				// Nobody can be asked here: say so before connecting or
				// waiting for a request, and how to answer instead.
				return noTerminal(args)
			}
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			if as == "" {
				as = whoami()
			}
			if !yes {
				// A person is here: reachable while heed confirm waits
				// for a request and while it asks.
				defer beReachable(ctx, c, as, cmd.ErrOrStderr())()
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			} else if id, err = nextPending(cmd, c, as); err != nil {
				return err
			}
			st, err := c.Confirmation(ctx, id)
			if err != nil {
				return err
			}
			var res promptResult
			if yes {
				start := time.Now()
				var a command.AnswerReply
				a, err = c.Answer(ctx, command.AnswerConfirmation{ID: id, Choice: confirmation.ProceedChoice(st.Request), By: as, Channel: "cli", Reason: "--yes"})
				res = promptResult{Choice: a.Choice, Method: a.Method, By: a.By, Duration: time.Since(start), Counted: a.Counted}
			} else {
				res, err = prompt(ctx, c, st, as, os.Stdin, cmd.OutOrStdout(), g.palette(cmd))
				if errors.Is(err, errNoTerminal) {
					return noTerminal([]string{id})
				}
				if errors.Is(err, context.Canceled) {
					// Ctrl-C at the prompt: the question stays open.
					return &exitError{status: exitInterrupted, msg: fmt.Sprintf("interrupted; confirmation %s is still open (heed confirm answer %s <choice>)", id, id)}
				}
			}
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), res)
				return nil
			}
			if res.Counted {
				fmt.Fprintf(cmd.OutOrStdout(), "vote counted: %s by %s; the quorum is not reached yet (heed confirm show %s)\n", res.Choice, res.By, id)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "→ %s (%s by %s, %s)\n", res.Choice, res.Method, res.By, humanDuration(res.Duration))
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "answer with the proceed option instead of asking (recorded as your answer, reason --yes)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result (choice, method, duration) as JSON")
	cmd.Flags().StringVar(&as, "as", "", "who answers, and is reachable for escalations while heed confirm waits (default $HEED_IDENTITY, else the current user)")
	_ = cmd.RegisterFlagCompletionFunc("as", cobra.NoFileCompletions)
	cmd.PreRunE = idArg("confirmation")
	var reason, by, remember string
	var answerJSON bool
	answer := &cobra.Command{
		Use:   "answer CONFIRM-ID CHOICE",
		Short: "Answer a confirmation (the first answer wins; later ones are refused)",
		Long: `Answer a confirmation: the first valid answer takes effect and later ones are
refused. A confirmation that names its approvers takes answers from them only
(--by); one with a quorum counts each answer as a vote until enough approvers
agree, and prints "vote counted: 1 of 2 for approve (alice)" meanwhile.`,
		Example: `  heed confirm answer 01kmz3h7q8r2v5x9c4d6e8f0gt-s1-a1 proceed
  heed confirm answer 01kmz3h7q8r2v5x9c4d6e8f0gt-s1-a1 cancel --reason "release freeze"
  heed confirm answer 01kmz3h7q8r2v5x9c4d6e8f0gt-s1-a1 proceed --remember skill_step`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: g.completeAnswer(),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			if by == "" {
				by = whoami()
			}
			a, err := c.Answer(cmd.Context(), command.AnswerConfirmation{ID: args[0], Choice: args[1], By: by, Channel: "cli", Reason: reason, Remember: remember})
			if err != nil {
				return err
			}
			if answerJSON {
				printJSON(cmd.OutOrStdout(), a)
				return nil
			}
			if a.Counted {
				have, of := tally(a.Votes, a.Choice, a.Needed)
				fmt.Fprintf(cmd.OutOrStdout(), "vote counted: %d of %d for %s (%s)\n", len(have), of, a.Choice, strings.Join(have, ", "))
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "answered %s: %s (by %s)\n", a.ID, a.Choice, a.By)
			if have, _ := tally(a.Votes, a.Choice, 0); len(have) > 1 {
				fmt.Fprintf(cmd.OutOrStdout(), "quorum reached: %s\n", strings.Join(have, ", "))
			}
			return nil
		}),
	}
	answer.Flags().BoolVar(&answerJSON, "json", false, "JSON output")
	answer.Flags().StringVar(&reason, "reason", "", "why (recorded on the answer)")
	answer.PreRunE = idArg("confirmation")
	answer.Flags().StringVar(&by, "by", "", "who answers (default the current user)")
	answer.Flags().StringVar(&by, "as", "", "the same as --by (as heed confirm and heed changes spell it)")
	answer.Flags().StringVar(&remember, "remember", "", "remember the choice: skill_step (always for this skill step), error, or ask_again")
	_ = answer.RegisterFlagCompletionFunc("remember", completeChoices("skill_step", "error", "ask_again"))
	_ = answer.RegisterFlagCompletionFunc("by", cobra.NoFileCompletions)
	_ = answer.RegisterFlagCompletionFunc("reason", cobra.NoFileCompletions)
	var showJSON bool
	show := &cobra.Command{
		Use:   "show CONFIRM-ID",
		Short: "Show a confirmation: the question, its options and its answer",
		Example: `  heed confirm show 01kmz3h7q8r2v5x9c4d6e8f0gt-s1-a1
  heed confirm show 01kmz3h7q8r2v5x9c4d6e8f0gt-s1-a1 --json | jq .answer`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeConfirmations(),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			st, err := c.Confirmation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if showJSON {
				printJSON(cmd.OutOrStdout(), newConfirmView(st))
				return nil
			}
			printConfirm(cmd.OutOrStdout(), g.palette(cmd), st)
			return nil
		}),
	}
	show.Flags().BoolVar(&showJSON, "json", false, "JSON output")
	var listJSON, listAll bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List confirmations waiting for an answer (--all: answered ones too)",
		Example: `  heed confirm list
  heed confirm list --all
  heed confirm list --json | jq -r '.[].id'`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			entries, err := c.Index(cmd.Context(), "confirm")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			shown := []readmodel.IndexEntry{}
			for _, e := range entries {
				if listAll || e.Open() {
					shown = append(shown, e)
				}
			}
			if listJSON {
				printJSON(out, shown)
				return nil
			}
			if len(shown) == 0 {
				fmt.Fprintln(out, "(nothing waiting)")
				return nil
			}
			pal := g.palette(cmd)
			t := newTable(out)
			t.row(pal.bold("CONFIRMATION"), pal.bold("STATUS"), pal.bold("RUN"), pal.bold("OPTIONS"), pal.bold("SINCE"))
			for _, e := range shown {
				opts := strings.Join(e.Options, "/")
				if e.Choice != "" {
					opts = "→ " + e.Choice
				}
				t.row(e.ID, pal.status(e.Status), e.RunID, opts, humanDuration(time.Since(e.First.Time).Round(time.Second))+" ago")
			}
			t.Flush()
			return nil
		}),
	}
	show.PreRunE = idArg("confirmation")
	list.Flags().BoolVar(&listJSON, "json", false, "JSON output")
	list.Flags().BoolVar(&listAll, "all", false, "answered confirmations too")
	cmd.AddCommand(answer, show, list)
	return cmd
}

// noTerminal is heed confirm's error without a terminal: it fails at once
// and says how to answer instead.
func noTerminal(args []string) error {
	how := "answer with `heed confirm answer CONFIRM-ID CHOICE` (heed confirm list shows what waits)"
	if len(args) == 1 {
		how = fmt.Sprintf("answer with `heed confirm answer %s CHOICE` (heed confirm show %s lists the choices)", args[0], args[0])
	}
	return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: fmt.Sprintf("%v: %s, or pass --yes to proceed", errNoTerminal, how)}
}

// mayAnswer reports whether who is among a confirmation's approvers (any
// one may answer when it names none): the rule every channel applies.
func mayAnswer(st *confirmation.State, who string) bool { return bridge.MayAnswer(st, who) }

// nextPending returns the oldest confirmation waiting for an answer that
// who may give, or waits for the next request. A confirmation that names
// its approvers without who is someone else's to answer.
func nextPending(cmd *cobra.Command, c *client, who string) (string, error) {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	pending, err := c.WatchPending(ctx)
	if err != nil {
		return "", err
	}
	hint := time.After(300 * time.Millisecond)
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	var candidate string
	for {
		select {
		case <-cmd.Context().Done():
			return "", cmd.Context().Err()
		case <-hint:
			if candidate == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "waiting for a confirmation request (Ctrl-C to stop)")
			}
		case <-settle.C:
			// The request outlived the router's fast layers (a rule, a
			// remembered choice): a person is needed.
			return candidate, nil
		case p, ok := <-pending:
			if !ok {
				return "", events.Errorf(events.CodeUnavailable, "lost the watch of pending confirmations")
			}
			switch {
			case p.Closed && p.ID == candidate:
				candidate = ""
				settle.Stop()
			case !p.Closed && candidate == "" && mayAnswer(p.State, who):
				candidate = p.ID
				settle.Reset(50 * time.Millisecond)
			}
		}
	}
}

// confirmView is `heed confirm show --json`: the confirmation as its
// events tell it.
type confirmView struct {
	ID          string                       `json:"id"`
	Status      string                       `json:"status"` // waiting, answered, expired
	Request     *events.ConfirmRequestedData `json:"request,omitempty"`
	RequestedAt time.Time                    `json:"requested_at,omitzero"`
	Default     string                       `json:"default,omitempty"`
	Answer      *events.ConfirmAnsweredData  `json:"answer,omitempty"`
	AnswerID    string                       `json:"answer_id,omitempty"`
	AnsweredAt  time.Time                    `json:"answered_at,omitzero"`
	Expired     *events.ConfirmExpiredData   `json:"expired,omitempty"`
	Delegated   *events.ConfirmDelegatedData `json:"delegated,omitempty"`
	Answers     []answerView                 `json:"answers,omitempty"`
	Votes       []confirmation.Vote          `json:"votes,omitempty"`
}

// answerView is one answer event and its verdict.
type answerView struct {
	Seq     uint64                     `json:"seq"`
	EventID string                     `json:"event_id"`
	Source  string                     `json:"source"`
	At      time.Time                  `json:"at"`
	Data    events.ConfirmAnsweredData `json:"data"`
	Refusal *confirmation.Refusal      `json:"refusal,omitempty"`
	Counted bool                       `json:"counted,omitempty"`
}

func newConfirmView(st *confirmation.State) confirmView {
	v := confirmView{ID: st.ID, Request: st.Request, RequestedAt: st.RequestedAt, Default: st.Gate.Default, Answer: st.Answer, AnswerID: st.AnswerID,
		AnsweredAt: st.AnsweredAt, Expired: st.Expired, Delegated: st.Delegated}
	switch {
	case st.Answer != nil:
		v.Status = "answered"
	case st.Expired != nil:
		v.Status = "expired"
	default:
		v.Status = "waiting"
	}
	for _, a := range st.Answers {
		v.Answers = append(v.Answers, answerView{Seq: a.Seq, EventID: a.EventID, Source: a.Source, At: a.At, Data: a.Data, Refusal: a.Refusal, Counted: a.Counted})
	}
	v.Votes = st.Gate.Votes
	return v
}

func printConfirm(w writer, pal palette, st *confirmation.State) {
	r := st.Request
	if r.Title != "" {
		fmt.Fprintf(w, "%s\n", pal.bold(oneLine(r.Title)))
	}
	fmt.Fprintf(w, "%s\n", textutil.Lines(strings.TrimRight(r.Message, "\n")))
	for i, o := range r.Options {
		def := ""
		if o.Value == r.Default {
			def = " (default)"
		}
		desc := ""
		if o.Description != "" {
			desc = " — " + oneLine(o.Description)
		}
		fmt.Fprintf(w, "  %d) %s [%s]%s%s\n", i+1, oneLine(o.Label), oneLine(o.Value), def, desc)
	}
	if r.RunID != "" {
		fmt.Fprintf(w, "run %s, skill %s, step %s\n", r.RunID, r.Skill, r.Step)
	}
	if len(r.Approvers) > 0 {
		fmt.Fprintf(w, "approvers: %s\n", oneLine(strings.Join(r.Approvers, ", ")))
	}
	if q := r.Quorum; q != nil {
		veto := ""
		if len(q.Veto) > 0 {
			veto = "; one vote for " + oneLine(strings.Join(q.Veto, " or ")) + " decides"
		}
		fmt.Fprintf(w, "quorum: %d must agree%s\n", q.Required, veto)
		for _, line := range voteLines(&st.Gate) {
			fmt.Fprintf(w, "votes: %s\n", line)
		}
	}
	switch {
	case st.Answer != nil:
		fmt.Fprintf(w, "%s %q by %s (%s) at %s\n", pal.status("answered"), st.Answer.Choice, oneLine(st.Answer.By), st.Answer.Method, st.AnsweredAt.Local().Format(time.DateTime))
	case st.Expired != nil:
		fmt.Fprintf(w, "%s at %s; default %q applies\n", pal.status("expired"), st.Expired.Deadline.Local().Format(time.DateTime), st.Expired.Default)
	default:
		fmt.Fprintf(w, "%s since %s (%s)\n", pal.status("waiting"), st.RequestedAt.Local().Format(time.DateTime), humanDuration(time.Since(st.RequestedAt).Round(time.Second)))
	}
}

// tally lists who voted for choice and how many votes it needs in all
// (those counted plus needed).
func tally(votes []command.Vote, choice string, needed int) (by []string, of int) {
	for _, v := range votes {
		if v.Choice == choice {
			by = append(by, v.By)
		}
	}
	return by, len(by) + needed
}

// voteLines says, per option voted for, who voted and how many votes it
// still needs: "approve by alice, 1 of 2 needed".
func voteLines(g *confirmation.Gate) []string {
	var order []string
	by := map[string][]string{}
	for _, v := range g.Votes {
		if by[v.Choice] == nil {
			order = append(order, v.Choice)
		}
		by[v.Choice] = append(by[v.Choice], v.By)
	}
	var out []string
	for _, c := range order {
		line := oneLine(fmt.Sprintf("%s by %s", c, strings.Join(by[c], ", ")))
		if g.Winner == nil {
			line += fmt.Sprintf(", %d of %d needed", len(by[c]), len(by[c])+g.Needed(c))
		}
		out = append(out, line)
	}
	return out
}

// lintResult is one file's verdict in `heed skill lint --json`.
type lintResult struct {
	File   string   `json:"file"`
	OK     bool     `json:"ok"`
	Skill  string   `json:"skill,omitempty"`
	Steps  int      `json:"steps,omitempty"`
	Errors []string `json:"errors,omitempty"`
}

func newSkillCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "skill", Short: "Work with skill files", Args: cobra.NoArgs,
		Example: `  heed skill lint --tools skills/tools.yaml skills/release_prod.yaml skills/scale_down.yaml`}
	var toolsFile string
	var asJSON bool
	lint := &cobra.Command{
		Use:   "lint FILE...",
		Short: "Check skills: every error with file:line, before anything runs",
		Long: `Check skills: every error with file:line, before anything runs. Tool names
are checked against --tools FILE, else against the tools of the running heed
(its runner's, as heed up --tools loaded them); with neither, lint says that
tools were not checked. Exit status 2 when a skill has an error or uses an
unknown tool.`,
		Example: `  heed skill lint skills/release_prod.yaml
  heed skill lint --tools skills/tools.yaml skills/release_prod.yaml skills/scale_down.yaml
  heed skill lint --json skills/branch_cleanup.yaml skills/release_prod.yaml | jq '.[] | select(.ok | not)'`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeSkillFiles(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			known, where, err := lintTools(cmd.Context(), g, toolsFile)
			if err != nil {
				return err
			}
			if known == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "heed: tool names not checked: %s (heed skill lint --tools FILE checks them)\n", where)
			}
			out := cmd.OutOrStdout()
			pal := g.palette(cmd)
			results := []lintResult{}
			for _, f := range args {
				res := lintResult{File: f}
				results = append(results, res)
				last := &results[len(results)-1]
				src, err := readFile(f)
				if err != nil {
					last.Errors = []string{fmt.Sprintf("%s: %v", f, err)}
					continue
				}
				sk, err := skill.Load(f, src)
				if err != nil {
					last.Errors = strings.Split(strings.TrimRight(err.Error(), "\n"), "\n")
					continue
				}
				last.Skill, last.Steps = sk.Name, len(sk.Steps)
				if known != nil {
					for _, st := range sk.Steps {
						if st.Kind == skill.KindTool && !slices.Contains(known, st.Tool) {
							last.Errors = append(last.Errors, fmt.Sprintf("%s: step %q: unknown tool %q (not in %s)%s", st.Pos, st.Name, st.Tool, where, textutil.Hint(st.Tool, known)))
						}
					}
				}
				last.OK = len(last.Errors) == 0
			}
			bad := 0
			for _, r := range results {
				if !r.OK {
					bad++
				}
			}
			if asJSON {
				printJSON(out, results)
			} else {
				for _, r := range results {
					if r.OK {
						fmt.Fprintf(out, "%s: %s (skill %s, %d steps)\n", r.File, pal.green("ok"), r.Skill, r.Steps)
						continue
					}
					fmt.Fprintln(out, strings.Join(r.Errors, "\n"))
				}
			}
			if bad > 0 {
				return &exitError{status: exitUsage}
			}
			return nil
		},
	}
	lint.Flags().StringVar(&toolsFile, "tools", "", "check tool names against this tools file (default: the running heed's)")
	lint.Flags().BoolVar(&asJSON, "json", false, "print one verdict per file as JSON")
	_ = lint.RegisterFlagCompletionFunc("tools", completeYAML)
	cmd.AddCommand(lint)
	return cmd
}

// lintTools returns the tool names to lint against and where they come
// from: the tools file, else the running heed's runner. Without either,
// known is nil and where says why.
func lintTools(ctx context.Context, g *globals, toolsFile string) (known []string, where string, err error) {
	if toolsFile != "" {
		reg, err := tool.LoadFile(toolsFile)
		if err != nil {
			return nil, "", badInput("%v", err)
		}
		return reg.Names(), toolsFile, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := g.connect(ctx)
	if err != nil {
		return nil, "no --tools and no running heed to ask", nil
	}
	defer c.close()
	h := c.Health(ctx, time.Second, "runner")[0]
	if h.Health == nil {
		return nil, "no --tools and the running heed's runner does not answer", nil
	}
	var check struct {
		Tools     []string `json:"tools"`
		ToolsFile string   `json:"tools_file"`
	}
	b, _ := json.Marshal(h.Health.Checks["runner"])
	if json.Unmarshal(b, &check) != nil || check.Tools == nil {
		return nil, "no --tools and the running heed's runner does not list its tools", nil
	}
	where = "the running heed's tools, " + check.ToolsFile
	if check.ToolsFile == "" {
		where = "the running heed's tools: none loaded, see heed up --tools"
	}
	return check.Tools, where, nil
}
