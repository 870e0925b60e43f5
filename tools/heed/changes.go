package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// newChangesCmd is heed changes: review agents' change sets item by item
// (docs/CHANGESETS.md).
func newChangesCmd(g *globals) *cobra.Command {
	var as string
	cmd := &cobra.Command{
		Use:   "changes [SET-ID]",
		Short: "Review agents' proposed change sets item by item: confirm, reject with a reason, defer, confirm all",
		Long: `Review the change sets agents proposed. On a terminal, heed changes shows
the oldest open set (or SET-ID) as a card, one line an item with its summary
and its before → after, and takes a key per item: 1-9 and 0 (item 10) move to
an item, c confirms it, r rejects it (asking a reason), d defers it, a
confirms every item still pending, n goes to the next open set, q quits. A
decision made elsewhere (another terminal, the console, a bridge) shows at
once; each item's first decision wins. Confirmed items are applied by the
runner; the card shows each result.

Without a terminal it lists the open sets; heed changes confirm, reject and
defer decide from scripts.`,
		Example: `  heed changes
  heed changes cs-01jd2c3ykq4mnt7v9x0a1b2c3d
  heed changes list --agent agent:laura
  heed changes confirm cs-01jd2c3ykq4mnt7v9x0a1b2c3d 1 3 4
  heed changes reject cs-01jd2c3ykq4mnt7v9x0a1b2c3d 5 --reason "smoke tests run in CI"
  heed changes history agent:laura`,
		Args:    cobra.MaximumNArgs(1),
		PreRunE: idArg("change set"),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			who := as
			if who == "" {
				who = whoami()
			}
			if !term.IsTerminal(int(os.Stdin.Fd())) || !isTerminal(cmd.OutOrStdout()) {
				if len(args) == 1 {
					st, err := c.ChangeSet(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					printChangeSet(cmd.OutOrStdout(), g.palette(cmd), &st)
					return nil
				}
				return listChanges(cmd, g, c, command.ListChangeSets{}, false)
			}
			return reviewChanges(cmd.Context(), c, args, who, os.Stdin, cmd.OutOrStdout(), g.palette(cmd))
		}),
	}
	cmd.Flags().StringVar(&as, "as", "", "who decides (default $HEED_IDENTITY, else the current user)")

	var agent, subject, after string
	var all, listJSON bool
	var limit int
	list := &cobra.Command{
		Use:   "list [--agent A] [--subject S] [--all] [--after NEXT]",
		Short: "List change sets, newest first: open ones (pending, partially resolved) unless --all",
		Long: `List change sets, newest first: open ones (pending, partially resolved)
unless --all. A list longer than --limit, or than one reply holds (900 KiB),
ends with how many more there are and the --after that shows the next page.`,
		Example: `  heed changes list
  heed changes list --agent agent:laura --subject task-42
  heed changes list --all --json | jq -r '.sets[].id'
  heed changes list --all --after 1764337200000000000.01jd9k2m`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			return listChanges(cmd, g, c, command.ListChangeSets{Agent: agent, Subject: subject, All: all, Limit: limit, After: after}, listJSON)
		}),
	}
	list.Flags().StringVar(&after, "after", "", "the next page: the --after a list before ended with (its reply's next)")
	list.Flags().StringVar(&agent, "agent", "", "only this agent's sets")
	list.Flags().StringVar(&subject, "subject", "", "only sets about this subject (a task, a ticket, a repository)")
	list.Flags().BoolVar(&all, "all", false, "resolved and expired sets too")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many sets")
	list.Flags().BoolVar(&listJSON, "json", false, "JSON output (as heed.cmd.changeset.list replies)")

	var showJSON bool
	show := &cobra.Command{
		Use:   "show SET-ID",
		Short: "Show a change set: every item with its summary, before → after, decision and result",
		Example: `  heed changes show cs-01jd2c3ykq4mnt7v9x0a1b2c3d
  heed changes show cs-01jd2c3ykq4mnt7v9x0a1b2c3d --json | jq .items`,
		Args:    cobra.ExactArgs(1),
		PreRunE: idArg("change set"),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			st, err := c.ChangeSet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if showJSON {
				printJSON(cmd.OutOrStdout(), st)
				return nil
			}
			printChangeSet(cmd.OutOrStdout(), g.palette(cmd), &st)
			return nil
		}),
	}
	show.Flags().BoolVar(&showJSON, "json", false, "JSON output (the folded set, as heed.cmd.changeset.status replies)")

	cmd.AddCommand(list, show,
		newDecideCmd(g, "confirm", events.VerdictConfirmed, "Confirm items (or --all pending): the runner applies them", `  heed changes confirm cs-01jd2c3ykq4mnt7v9x0a1b2c3d 1 2
  heed changes confirm cs-01jd2c3ykq4mnt7v9x0a1b2c3d --all`),
		newDecideCmd(g, "reject", events.VerdictRejected, "Reject items, with a reason the agent reads at its next wake", `  heed changes reject cs-01jd2c3ykq4mnt7v9x0a1b2c3d 5 --reason "smoke tests run in CI"`),
		newDecideCmd(g, "defer", events.VerdictDeferred, "Defer items: not now (the agent may propose them again later)", `  heed changes defer cs-01jd2c3ykq4mnt7v9x0a1b2c3d 2`),
		newHistoryCmd(g), newProposeCmd(g))
	return cmd
}

// newDecideCmd is heed changes confirm|reject|defer SET-ID ITEM...
func newDecideCmd(g *globals, use, verdict, short, example string) *cobra.Command {
	var reason, as string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:     use + " SET-ID ITEM...",
		Short:   short,
		Example: example,
		Args:    cobra.MinimumNArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if err := idArg("change set")(cmd, args); err != nil {
				return err
			}
			if all && verdict != events.VerdictConfirmed {
				return badInput("--all is for confirm only (confirm all)")
			}
			if all == (len(args) > 1) {
				return badInput("name the items by number (heed changes show %s lists them), or --all", args[0])
			}
			return nil
		},
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			req := command.DecideChangeSet{ID: args[0], All: all, Verdict: verdict, Reason: reason, By: as, Channel: "cli"}
			if req.By == "" {
				req.By = whoami()
			}
			for _, a := range args[1:] {
				n, err := strconv.Atoi(a)
				if err != nil || n < 1 || n > events.MaxChangeItems {
					return badInput("item %q: use the item's number, 1 to %d", a, events.MaxChangeItems)
				}
				req.Items = append(req.Items, n)
			}
			rep, err := c.DecideChanges(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), rep)
				return nil
			}
			out := cmd.OutOrStdout()
			for _, d := range rep.Decided {
				fmt.Fprintf(out, "item %d %s by %s\n", d.Item, d.Verdict, d.By)
			}
			for _, d := range rep.Already {
				fmt.Fprintf(out, "item %d was already %s by %s%s\n", d.Item, d.Verdict, d.By, via(d.Channel))
			}
			fmt.Fprintf(out, "change set %s: %s\n", rep.ID, strings.ReplaceAll(rep.Status, "_", " "))
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (the agent reads it at its next wake)")
	cmd.Flags().StringVar(&as, "as", "", "who decides (default $HEED_IDENTITY, else the current user)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output (as heed.cmd.changeset.decide replies)")
	if verdict == events.VerdictConfirmed {
		cmd.Flags().BoolVar(&all, "all", false, "confirm every item still pending")
	}
	return cmd
}

func via(channel string) string {
	if channel == "" {
		return ""
	}
	return " via " + channel
}

// newHistoryCmd is heed changes history AGENT: what the agent reads at
// its next wake.
func newHistoryCmd(g *globals) *cobra.Command {
	var subject string
	var limit, budget int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "history AGENT [--subject S]",
		Short: "An agent's recent decisions, as its next wake reads them (decision_history)",
		Example: `  heed changes history agent:laura
  heed changes history agent:laura --subject task-42 --json | jq .decisions`,
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			rep, err := c.DecisionHistory(cmd.Context(), command.DecisionHistoryRequest{Agent: args[0], Subject: subject, Limit: limit, BudgetTokens: budget})
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), rep)
				return nil
			}
			fmt.Fprint(cmd.OutOrStdout(), rep.Text)
			if rep.Omitted > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "(%d older decisions left out: limit %d, about %d tokens)\n", rep.Omitted, max(limit, changeset.DefaultHistoryLimit), rep.Tokens)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&subject, "subject", "", "only decisions about this subject")
	cmd.Flags().IntVar(&limit, "limit", changeset.DefaultHistoryLimit, "at most this many decisions")
	cmd.Flags().IntVar(&budget, "budget", changeset.DefaultHistoryBudget, "about this many tokens of text at most (4 bytes a token)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output (as heed.cmd.changeset.history replies)")
	return cmd
}

// newProposeCmd is heed changes propose: an agent's wake from a script.
func newProposeCmd(g *globals) *cobra.Command {
	var id, agent, subject, wake, title, file string
	var expires time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "propose --agent A --subject S --calls FILE",
		Short: "Propose calls of deferred tools for review (what an agent does at the end of a wake)",
		Long: `Propose calls of deferred tools for review. FILE (- for stdin) holds a JSON
array of calls: [{"tool": "set_task_title", "args": {"task": "task-42",
"title": "Fix login bug"}, "summary": "…", "before": {"title": "login"}}].
Each call becomes an item (a batch tool's call one item per element); more
than 10 items are split into parts. A call of an immediate or unknown tool,
or one without an argument its tool needs, refuses the whole proposal
(exit 2).`,
		Example: `  heed changes propose --agent agent:laura --subject task-42 --calls calls.json
  echo '[{"tool":"set_task_title","args":{"task":"task-42","title":"Fix login bug"}}]' | heed changes propose --agent agent:laura --subject task-42 --calls -`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			var b []byte
			var err error
			if file == "-" {
				b, err = io.ReadAll(cmd.InOrStdin())
			} else {
				b, err = os.ReadFile(file)
			}
			if err != nil {
				return badInput("--calls: %v", err)
			}
			var calls []command.ProposedCall
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&calls); err != nil {
				return badInput("--calls %s: a JSON array of {\"tool\", \"args\", \"summary\", \"before\"}: %v", file, err)
			}
			req := command.ProposeChangeSet{ID: id, Agent: agent, Subject: subject, Wake: wake, Title: title, Calls: calls, ProposedBy: agent}
			if expires > 0 {
				req.ExpiresS = expires.Seconds()
			}
			rep, err := c.ProposeChanges(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), rep)
				return nil
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, rep.Message)
			for _, s := range rep.Sets {
				for _, it := range s.Items {
					fmt.Fprintf(out, "  %s  %s\n", it.ID, it.Summary)
				}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&id, "id", "", "the set's id (default: a new one); proposing the same id and calls again returns the set")
	cmd.Flags().StringVar(&agent, "agent", "", "the agent proposing (required)")
	cmd.Flags().StringVar(&subject, "subject", "", "what it works on: a task, a ticket, a repository (required)")
	cmd.Flags().StringVar(&wake, "wake", "", "the agent wake that proposes")
	cmd.Flags().StringVar(&title, "title", "", "a title for the set")
	cmd.Flags().StringVar(&file, "calls", "", "JSON file of the calls (- for stdin; required)")
	cmd.Flags().DurationVar(&expires, "expires", 0, "how long the items wait for decisions (default: the service's, 7 days)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output (as heed.cmd.changeset.propose replies)")
	_ = cmd.MarkFlagRequired("agent")
	_ = cmd.MarkFlagRequired("subject")
	_ = cmd.MarkFlagRequired("calls")
	return cmd
}

func listChanges(cmd *cobra.Command, g *globals, c *client, req command.ListChangeSets, asJSON bool) error {
	if req.Limit < 0 {
		return badInput("--limit %d: use a positive number", req.Limit)
	}
	rep, err := c.ChangeSets(cmd.Context(), req)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		printJSON(out, rep)
		return nil
	}
	if len(rep.Sets) == 0 {
		if req.All {
			fmt.Fprintln(out, "(no change sets)")
		} else {
			fmt.Fprintln(out, "(no open change sets)")
		}
		return nil
	}
	pal := g.palette(cmd)
	t := newTable(out)
	t.row(pal.bold("CHANGE SET"), pal.bold("AGENT"), pal.bold("SUBJECT"), pal.bold("ITEMS"), pal.bold("PENDING"), pal.bold("STATUS"), pal.bold("PROPOSED"), pal.bold("EXPIRES"))
	for _, s := range rep.Sets {
		t.row(s.ID, truncate(s.Proposal.Agent, 24), truncate(s.Proposal.Subject, 32), strconv.Itoa(len(s.Items)), strconv.Itoa(len(changeset.Pending(&s))),
			pal.status(strings.ReplaceAll(s.Status, "_", " ")), humanDuration(time.Since(s.ProposedAt).Round(time.Second))+" ago", expiresIn(&s))
	}
	t.Flush()
	switch {
	case rep.More > 0 && req.Limit > 0 && len(rep.Sets) < req.Limit:
		// Cut by size, not by --limit: a reply holds what fits in 900 KiB.
		fmt.Fprintf(out, "(%d more: more than one reply holds; the next page: --after %s)\n", rep.More, rep.Next)
	case rep.More > 0:
		fmt.Fprintf(out, "(%d more: --limit, or the next page: --after %s)\n", rep.More, rep.Next)
	}
	return nil
}

func expiresIn(st *command.ChangeSetState) string {
	if !changeset.Open(st) {
		return "—"
	}
	return "in " + humanDuration(time.Until(st.Proposal.ExpiresAt).Round(time.Second))
}

// printChangeSet prints the seed's summary card: a line an item with its
// decision and result, items of a batch under their group's heading.
func printChangeSet(w io.Writer, pal palette, st *command.ChangeSetState) {
	printCard(w, pal, st, -1)
}

func printCard(w io.Writer, pal palette, st *command.ChangeSetState, cursor int) {
	n := len(st.Items)
	noun := "changes"
	if n == 1 {
		noun = "change"
	}
	head := fmt.Sprintf("✨ %s suggests %d %s for %s", oneLine(st.Proposal.Agent), n, noun, oneLine(st.Proposal.Subject))
	if st.Proposal.Title != "" {
		head += ": " + oneLine(st.Proposal.Title)
	}
	fmt.Fprintln(w, pal.bold(head))
	meta := fmt.Sprintf("%s · %s", st.ID, strings.ReplaceAll(st.Status, "_", " "))
	if changeset.Open(st) {
		meta += " · expires " + expiresIn(st)
	}
	if st.Proposal.Parts > 1 {
		meta += fmt.Sprintf(" · part %d of %d (%s)", st.Proposal.Part, st.Proposal.Parts, strings.Join(st.Proposal.Related, ", "))
	}
	fmt.Fprintln(w, pal.dim(meta))
	fmt.Fprintln(w)
	group := ""
	for i, it := range st.Items {
		if it.Group != group && it.Group != "" {
			count := 0
			for _, o := range st.Items[i:] {
				if o.Group == it.Group {
					count++
				}
			}
			fmt.Fprintln(w, pal.dim(fmt.Sprintf("  ┄┄ %s (%d) ┄┄", oneLine(it.Group), count)))
		}
		group = it.Group
		mark := "  "
		if i == cursor {
			mark = pal.bold("▶ ")
		}
		line := fmt.Sprintf("%s%d) %-44s %s", mark, it.Item, truncate(it.Summary, 44), itemState(pal, &it))
		fmt.Fprintln(w, line)
		if p := preview(&it); p != "" {
			fmt.Fprintln(w, "      "+pal.dim(p))
		}
		if it.ArgsTruncated {
			fmt.Fprintln(w, "      "+pal.dim("(args shortened: the set is too large to show whole; heed audit "+st.ID+" has them)"))
		}
	}
}

// itemState is an item's decision and result in a word or two.
func itemState(pal palette, it *command.ChangeItemState) string {
	var s string
	switch it.Status {
	case events.ItemPending:
		return pal.status("pending")
	case events.VerdictConfirmed:
		s = pal.green("✓ confirmed")
	case events.VerdictRejected:
		s = pal.red("✗ rejected")
	case events.VerdictDeferred:
		s = pal.paint(sgrYellow, "⏸ deferred")
	case events.ItemExpired:
		return pal.dim("– expired (no decision)")
	}
	s += pal.dim(" by " + it.By + via(it.Channel))
	if it.Reason != "" {
		s += pal.dim(fmt.Sprintf(" (%q)", truncate(it.Reason, 60)))
	}
	switch it.Apply {
	case events.ApplyApplying:
		s += " · applying"
	case events.ApplyApplied:
		s += " · " + pal.green("applied")
	case events.ApplyFailed:
		what := "failed"
		if it.Stale {
			what = "stale, not applied"
		}
		msg := ""
		if it.Error != nil {
			msg = ": " + truncate(firstLineOf(it.Error.Message), 80)
		}
		s += " · " + pal.red(what+msg)
	}
	return s
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// preview is an item's before → after on one line:
// "title: login → Fix login bug".
func preview(it *command.ChangeItemState) string {
	var parts []string
	for _, c := range changeset.Preview(it) {
		parts = append(parts, c.Field+": "+c.Before+" → "+c.After)
	}
	return truncate(strings.Join(parts, "; "), 120)
}

// reviewChanges is the interactive review on a terminal.
func reviewChanges(ctx context.Context, c *client, args []string, who string, in *os.File, out io.Writer, pal palette) error {
	next := func(skip map[string]bool) (string, error) {
		rep, err := c.ChangeSets(ctx, command.ListChangeSets{})
		if err != nil {
			return "", err
		}
		for i := len(rep.Sets) - 1; i >= 0; i-- { // oldest first
			if !skip[rep.Sets[i].ID] {
				return rep.Sets[i].ID, nil
			}
		}
		return "", nil
	}
	seen := map[string]bool{}
	id := ""
	if len(args) == 1 {
		id = args[0]
	}
	for {
		if id == "" {
			var err error
			if id, err = next(seen); err != nil {
				return err
			}
			if id == "" {
				fmt.Fprintln(out, "(no open change sets)")
				return nil
			}
		}
		seen[id] = true
		more, err := reviewSet(ctx, c, id, who, in, out, pal)
		if err != nil || !more {
			return err
		}
		id = ""
	}
}

// reviewSet reviews one set; more says the person asked for the next.
func reviewSet(ctx context.Context, c *client, id, who string, in *os.File, out io.Writer, pal palette) (more bool, err error) {
	st, err := c.ChangeSet(ctx, id)
	if err != nil {
		return false, err
	}
	// Hear decisions and results from anywhere, as the log stored them:
	// the newest state waits in changed.
	changed := make(chan *command.ChangeSetState, 1)
	defer keepWatching(ctx, func(wctx context.Context) bool {
		_ = c.WatchChangeSet(wctx, id, func(now *command.ChangeSetState) error {
			select {
			case <-changed: // superseded before it was drawn
			default:
			}
			changed <- now
			return nil
		})
		return false
	})()

	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return false, fmt.Errorf("terminal: %w", err)
	}
	defer func() { _ = term.Restore(int(in.Fd()), old) }()
	keys := make(chan byte, 16)
	stopKeys, keysDone := make(chan struct{}), make(chan struct{})
	go readKeys(in, keys, stopKeys, keysDone)
	defer func() { close(stopKeys); <-keysDone }()

	w := &crlf{w: out}
	cursor := 0
	if p := changeset.Pending(&st); len(p) > 0 {
		cursor = p[0] - 1
	}
	status := ""
	draw := func() {
		fmt.Fprint(w, "\033[H\033[2J")
		printCard(w, pal, &st, cursor)
		fmt.Fprintln(w)
		fmt.Fprintln(w, pal.dim("1-9,0 item · c confirm · r reject · d defer · a confirm all · n next set · q quit"))
		if status != "" {
			fmt.Fprintln(w, status)
		}
	}
	// A state replaces what is drawn only if it is as new: the watch and
	// the command's read race.
	take := func(now *command.ChangeSetState) {
		if now.Seq >= st.Seq {
			st = *now
		}
	}
	reload := func() {
		if now, err := c.ChangeSet(ctx, id); err == nil {
			take(&now)
		}
	}
	decide := func(items []int, all bool, verdict, reason string) {
		rep, err := c.DecideChanges(ctx, command.DecideChangeSet{ID: id, Items: items, All: all, Verdict: verdict, Reason: reason, By: who, Channel: "terminal"})
		switch {
		case err != nil:
			status = pal.red(events.Message(err))
		case len(rep.Decided) > 0:
			var nums []string
			for _, d := range rep.Decided {
				nums = append(nums, strconv.Itoa(d.Item))
			}
			status = fmt.Sprintf("item %s %s", strings.Join(nums, ", "), verdict)
		}
		reload()
		// On to the next pending item.
		if p := changeset.Pending(&st); len(p) > 0 {
			cursor = p[0] - 1
		}
	}
	// readReason reads a line in raw mode: Enter ends it, Esc cancels.
	readReason := func() (string, bool) {
		var b []byte
		fmt.Fprint(w, "reason (Enter to send, Esc to cancel): ")
		for {
			select {
			case <-ctx.Done():
				return "", false
			case k, ok := <-keys:
				if !ok {
					return "", false
				}
				switch k {
				case '\r', '\n':
					fmt.Fprintln(w)
					return string(b), true
				case 27, 3:
					return "", false
				case 127, 8:
					if len(b) > 0 {
						b = b[:len(b)-1]
						fmt.Fprint(w, "\b \b")
					}
				default:
					if k >= 32 {
						b = append(b, k)
						_, _ = w.Write([]byte{k})
					}
				}
			}
		}
	}
	draw()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case now := <-changed:
			take(now)
			draw()
		case k, ok := <-keys:
			if !ok {
				return false, nil
			}
			switch {
			case k == 'q' || k == 3 || k == 4:
				return false, nil
			case k == 'n':
				return true, nil
			case k >= '1' && k <= '9' || k == '0':
				n := int(k - '0')
				if k == '0' {
					n = 10
				}
				if n <= len(st.Items) {
					cursor = n - 1
				}
			case k == 'j' && cursor < len(st.Items)-1:
				cursor++
			case k == 'k' && cursor > 0:
				cursor--
			case k == 'c':
				decide([]int{cursor + 1}, false, events.VerdictConfirmed, "")
			case k == 'd':
				decide([]int{cursor + 1}, false, events.VerdictDeferred, "")
			case k == 'r':
				if reason, ok := readReason(); ok {
					decide([]int{cursor + 1}, false, events.VerdictRejected, strings.TrimSpace(reason))
				} else {
					status = "reject cancelled"
				}
			case k == 'a':
				decide(nil, true, events.VerdictConfirmed, "")
			}
			draw()
		}
	}
}
