package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/spf13/cobra"
)

// The escalation commands: an agent (or a person for it) asks the
// escalator for permission, follows the decision, asks whether a session
// may go on, and reports how the operation went (docs/ESCALATIONS.md,
// From the command line).

var escalationStatuses = []string{events.EscalationHeld, events.EscalationApproved, events.EscalationDenied}

func newEscalateCmd(g *globals) *cobra.Command {
	var req command.RequestEscalation
	var risk, confidence float64
	var quorum int
	var wait time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "escalate OPERATION --session SESSION [--scope X] [--env E] [--risk R] [--confidence C] [--wait[=DURATION]]",
		Short: "Ask the escalator for permission to do an operation (the answer comes at once: approved, denied or held)",
		Long: `Ask the escalator for permission to do an operation (heed.cmd.escalation.request).
The answer comes at once: approved (by a rule, with its safeguards, or by what
heed learned), denied, or held while a tier of approvers decides. heed
escalate prints the routing: the decision, the risk and where it came from,
the rule, the reason, the priority, the tier and the safeguards.

--wait follows a held request until it is decided and prints who decided;
--wait=10m gives up after 10 minutes (write the duration with '=').

Exit status: 0 approved (or held, without --wait); 3 denied; 1 still held
when --wait ran out, or heed could not ask; 2 bad input; 130 interrupted
(the request stays held).`,
		Example: `  heed escalate file_edit --session agent/doc --scope /tmp/notes.txt --risk 0.1 --confidence 0.9
  heed escalate force_push --session agent/doc --scope main --risk 0.95 --json
  heed escalate deploy --session agent/ci --env prod --scope service:api --approver user:alice --wait=10m`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if req.Session == "" {
				return badInput("--session is required: the agent session that asks")
			}
			for _, f := range []struct {
				name string
				v    float64
				p    **float64
			}{{"risk", risk, &req.Risk}, {"confidence", confidence, &req.Confidence}} {
				if !cmd.Flags().Changed(f.name) {
					continue
				}
				if f.v < 0 || f.v > 1 {
					return badInput("--%s %v: use a number from 0 to 1", f.name, f.v)
				}
				v := f.v
				*f.p = &v
			}
			if cmd.Flags().Changed("quorum") {
				if quorum < 1 {
					return badInput("--quorum %d: use at least 1", quorum)
				}
				req.Quorum = &events.Quorum{Required: quorum}
			}
			if wait < 0 {
				return badInput("--wait %s: use a positive duration", wait)
			}
			if req.ID != "" && !events.ValidID(req.ID) {
				return badInput("--id %q is not a valid id (letters, digits, '-' and '_')", req.ID)
			}
			return nil
		},
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			ctx := cmd.Context()
			req.Operation = args[0]
			req.Requester = whoami()
			reply, err := c.RequestEscalation(ctx, req)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			follow := cmd.Flags().Changed("wait") && reply.Status == events.EscalationHeld
			if asJSON && !follow {
				printJSON(out, reply)
				return decisionStatus(reply.Status)
			}
			if !asJSON {
				printRouting(out, g.palette(cmd), reply, true)
			}
			if !follow {
				return decisionStatus(reply.Status)
			}
			wctx := ctx
			if wait > 0 {
				var cancel context.CancelFunc
				wctx, cancel = context.WithTimeout(ctx, wait)
				defer cancel()
			}
			if !asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "waiting for the decision (Ctrl-C to stop; the request stays held)\n")
			}
			st, err := c.WaitEscalation(wctx, reply.ID)
			switch {
			case ctx.Err() != nil:
				return &exitError{status: exitInterrupted, msg: fmt.Sprintf("stopped waiting; escalation %s stays held (heed escalation show %s)", reply.ID, reply.ID)}
			case wctx.Err() != nil:
				return &exitError{status: exitFailure, code: events.CodeUnavailable, msg: fmt.Sprintf("escalation %s is still held after %s (heed escalation show %s)", reply.ID, wait, reply.ID)}
			case err != nil:
				return err
			}
			if asJSON {
				printJSON(out, st)
			} else {
				printDecided(out, g.palette(cmd), st)
			}
			return decisionStatus(st.Status)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Session, "session", "", "the agent session that asks (required)")
	f.StringVar(&req.Scope, "scope", "", "what the operation acts on (a path, a branch, a service)")
	f.StringVar(&req.Environment, "env", "", "the environment (dev, stage, prod, …)")
	f.Float64Var(&risk, "risk", 0, "the agent's risk score, 0 to 1 (default: the escalator's risk rules score it)")
	f.Float64Var(&confidence, "confidence", 0, "the agent's confidence, 0 to 1")
	f.StringArrayVar(&req.Approvers, "approver", nil, "who may approve (repeatable; narrows every tier's members)")
	f.IntVar(&quorum, "quorum", 0, "distinct approvers needed")
	f.StringVar(&req.Title, "title", "", "a title for the approvers")
	f.StringVar(&req.Message, "message", "", "what the approvers read")
	f.StringVar(&req.ID, "id", "", "the escalation id (the same id and content again return the same escalation)")
	f.DurationVar(&wait, "wait", 0, "follow a held request until it is decided, for at most this long (no value: until decided)")
	f.Lookup("wait").NoOptDefVal = "0s"
	f.BoolVar(&asJSON, "json", false, "JSON output: the reply, or with --wait the decided escalation")
	for _, n := range []string{"session", "scope", "env", "risk", "confidence", "approver", "quorum", "title", "message", "id", "wait"} {
		_ = cmd.RegisterFlagCompletionFunc(n, cobra.NoFileCompletions)
	}
	_ = cmd.RegisterFlagCompletionFunc("session", g.completeSessions())
	return cmd
}

// decisionStatus is the exit status of a decision: denied is 3 (the
// operation must not go ahead), approved and held 0.
func decisionStatus(status string) error {
	if status == events.EscalationDenied {
		return &exitError{status: exitNotCompleted}
	}
	return nil
}

func fmtScore(v float64) string { return fmt.Sprintf("%.2f", v) }

// printRouting prints the reply of a request: the id, the status and why.
func printRouting(w io.Writer, pal palette, r command.EscalationReply, header bool) {
	ro := r.Routed
	if header {
		fmt.Fprintf(w, "escalation %s: %s\n", r.ID, pal.status(r.Status))
	}
	rule := ""
	if ro.Rule != "" {
		rule = " (rule " + ro.Rule + ")"
	}
	fmt.Fprintf(w, "  decision: %s%s: %s\n", ro.Decision, rule, ro.Reason)
	src := ro.RiskSource
	if ro.RiskRule != "" {
		src += " " + ro.RiskRule
	}
	crit := ""
	if ro.Critical {
		crit = ", " + pal.red("critical")
	}
	fmt.Fprintf(w, "  risk %s (%s), confidence %s%s\n", fmtScore(ro.Risk), src, fmtScore(ro.Confidence), crit)
	if ro.Priority > 0 || ro.Tier != "" {
		fmt.Fprintf(w, "  priority %d, tier %s\n", ro.Priority, ro.Tier)
	}
	if ro.Cache != nil {
		fmt.Fprintf(w, "  learned: decided %d times, %.0f%% success, confidence boost %s\n", ro.Cache.Count, 100*ro.Cache.SuccessRate, fmtScore(ro.Cache.ConfidenceBoost))
	}
	sg := r.Safeguards
	if sg == nil {
		sg = ro.Safeguards
	}
	if s := safeguardList(sg); s != "" {
		fmt.Fprintf(w, "  safeguards: %s\n", s)
	}
	if o := r.Offer; o != nil {
		fmt.Fprintf(w, "  offered to %s until %s (%s): heed confirm answer %s approve|deny\n", o.Tier, o.Deadline.Local().Format("15:04:05"), humanDuration(time.Until(o.Deadline).Round(time.Second))+" left", o.ConfirmID)
	}
}

// safeguardList names the safeguards set: "log_extra, monitor".
func safeguardList(s *events.Safeguards) string {
	if !s.Any() {
		return ""
	}
	var out []string
	for _, x := range []struct {
		on   bool
		name string
	}{{s.LogExtra, "log_extra"}, {s.Monitor, "monitor"}, {s.Sandbox, "sandbox"}, {s.Rollback, "rollback"}} {
		if x.on {
			out = append(out, x.name)
		}
	}
	if s.Notes != "" {
		out = append(out, "notes: "+s.Notes)
	}
	return strings.Join(out, ", ")
}

// printDecided prints who decided a followed escalation.
func printDecided(w io.Writer, pal palette, st *command.EscalationState) {
	d := st.Decided
	if d == nil {
		fmt.Fprintf(w, "escalation %s: %s\n", st.ID, pal.status(st.Status))
		return
	}
	how := d.Method
	if d.Tier != "" {
		how += ", tier " + d.Tier
	}
	fmt.Fprintf(w, "→ %s by %s (%s) after %s\n", pal.status(d.Decision), d.By, how, humanDuration(time.Duration(d.HeldMS*float64(time.Millisecond)).Round(time.Millisecond)))
	if len(d.Votes) > 0 {
		var v []string
		for _, x := range d.Votes {
			v = append(v, x.Choice+" by "+x.By)
		}
		fmt.Fprintf(w, "  votes: %s\n", strings.Join(v, ", "))
	}
	if d.Reason != "" {
		fmt.Fprintf(w, "  reason: %s\n", d.Reason)
	}
	if s := safeguardList(d.Safeguards); s != "" {
		fmt.Fprintf(w, "  safeguards: %s\n", s)
	}
}

func newHeldCmd(g *globals) *cobra.Command {
	var check, asJSON bool
	cmd := &cobra.Command{
		Use:   "held [SESSION]",
		Short: "Whether a session may start new risky work, and its held requests (no SESSION: every session with held requests)",
		Long: `Whether a session may start new risky work, and its held requests
(heed.cmd.escalation.held, answered from the escalator's memory). The session
rule: more than 3 requests held, or any critical one held, and it may not;
the reason says which. Without SESSION: every session with held requests.

With --check the exit status is the verdict: 3 when the session (without
SESSION: any session) may not start new risky work, 0 when it may.`,
		Example: `  heed held agent/doc
  heed held agent/doc --check && echo "go on"
  heed held
  heed held --json | jq '.sessions[] | select(.can_continue | not) | .session'`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: onlyFirstArg(g.completeSessions()),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			session := ""
			if len(args) == 1 {
				session = args[0]
			}
			reply, err := c.Held(cmd.Context(), session)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			pal := g.palette(cmd)
			sessions := []command.SessionHeld{reply.SessionHeld}
			if session == "" {
				sessions = reply.Sessions
			}
			if asJSON {
				if session == "" && reply.Sessions == nil {
					reply.Sessions = []command.SessionHeld{}
				}
				printJSON(out, reply)
			} else if len(sessions) == 0 {
				fmt.Fprintln(out, "(no session has held requests)")
			}
			blocked := false
			for i, s := range sessions {
				blocked = blocked || !s.CanContinue
				if asJSON {
					continue
				}
				if i > 0 {
					fmt.Fprintln(out)
				}
				verdict := pal.green("may start new risky work")
				if !s.CanContinue {
					verdict = pal.red("may not start new risky work")
				}
				// The reason counts the held requests itself; without one,
				// say them.
				tail := fmt.Sprintf(" (%d held, %d critical)", s.Held, s.Critical)
				if s.Reason != "" {
					tail = ": " + s.Reason
				}
				fmt.Fprintf(out, "session %s %s%s\n", s.Session, verdict, tail)
				if len(s.Requests) == 0 {
					continue
				}
				t := newTable(out)
				t.row("  "+pal.bold("ESCALATION"), pal.bold("OPERATION"), pal.bold("SCOPE"), pal.bold("RISK"), pal.bold("TIER"), pal.bold("PRIORITY"), pal.bold("HELD FOR"))
				for _, r := range s.Requests {
					risk := fmtScore(r.Risk)
					if r.Critical {
						risk += " " + pal.red("critical")
					}
					t.row("  "+r.ID, r.Operation, r.Scope, risk, r.Tier, fmt.Sprint(r.Priority), humanDuration(time.Since(r.Since).Round(time.Second)))
				}
				t.Flush()
				if s.More > 0 {
					fmt.Fprintf(out, "  … and %d more (the oldest %d are listed)\n", s.More, len(s.Requests))
				}
			}
			if !asJSON && session == "" && len(sessions) > 0 {
				fmt.Fprintln(out, "\n(heed held SESSION lists a session's requests)")
				if reply.MoreSessions > 0 {
					fmt.Fprintf(out, "… and %d more sessions with held requests (those holding fewest)\n", reply.MoreSessions)
				}
			}
			if check && blocked {
				return &exitError{status: exitNotCompleted}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&check, "check", false, "exit 3 when the session may not start new risky work")
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	return cmd
}

func newEscalationCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "escalation", Short: "Show, list and report the outcome of escalations", Args: cobra.NoArgs,
		Example: `  heed escalation list --status held
  heed escalation show <esc-id>
  heed escalation outcome <esc-id> success`}

	var showJSON bool
	show := &cobra.Command{
		Use:   "show ESC-ID",
		Short: "Show an escalation: the request, its routing, every offer and escalation, the decision and the outcome",
		Example: `  heed escalation show doc-esc-2
  heed escalation show doc-esc-2 --json | jq .decided`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeEscalations(),
		PreRunE:           idArg("escalation"),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			st, err := c.EscalationStatus(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if showJSON {
				printJSON(cmd.OutOrStdout(), st)
				return nil
			}
			printEscalation(cmd.OutOrStdout(), g.palette(cmd), &st)
			return nil
		}),
	}
	show.Flags().BoolVar(&showJSON, "json", false, "JSON output (the folded state, as heed.cmd.escalation.status replies)")

	var session, status string
	var limit int
	var listJSON bool
	list := &cobra.Command{
		Use:   "list [--session S] [--status held|approved|denied]",
		Short: "List escalations, most recent first (from the escalator's bucket heed_escalations)",
		Example: `  heed escalation list
  heed escalation list --status held
  heed escalation list --session agent/doc --json | jq -r '.[].id'`,
		Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if limit < 0 {
				return badInput("--limit %d: use a positive number, or 0 for every escalation", limit)
			}
			if status != "" {
				return oneOf("--status", status, escalationStatuses)
			}
			return nil
		},
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			all, err := escalations(cmd.Context(), c)
			if err != nil {
				return err
			}
			shown := []readmodel.Escalation{}
			for _, e := range all {
				if (session == "" || e.Session == session) && (status == "" || e.Status == status) {
					shown = append(shown, e)
				}
				if len(shown) == limit {
					break
				}
			}
			out := cmd.OutOrStdout()
			if listJSON {
				printJSON(out, shown)
				return nil
			}
			if len(shown) == 0 {
				fmt.Fprintln(out, "(no escalations)")
				return nil
			}
			pal := g.palette(cmd)
			t := newTable(out)
			t.row(pal.bold("ESCALATION"), pal.bold("SESSION"), pal.bold("OPERATION"), pal.bold("SCOPE"), pal.bold("RISK"), pal.bold("STATUS"), pal.bold("BY"), pal.bold("SINCE"))
			for _, e := range shown {
				by := e.By
				if e.Status == events.EscalationHeld {
					by = "tier " + e.Tier
				}
				t.row(e.ID, truncate(e.Session, 24), truncate(e.Operation, 24), truncate(e.Scope, 32), fmtScore(e.Risk), pal.status(e.Status), by, humanDuration(time.Since(e.RequestedAt).Round(time.Second))+" ago")
			}
			t.Flush()
			return nil
		}),
	}
	list.Flags().StringVar(&session, "session", "", "only this session's")
	list.Flags().StringVar(&status, "status", "", "only escalations in this state ("+strings.Join(escalationStatuses, ", ")+")")
	list.Flags().IntVarP(&limit, "limit", "n", 20, "how many (0: every escalation)")
	list.Flags().BoolVar(&listJSON, "json", false, "JSON output")
	_ = list.RegisterFlagCompletionFunc("status", completeChoices(escalationStatuses...))
	_ = list.RegisterFlagCompletionFunc("session", g.completeSessions())

	var detail, by string
	var outJSON bool
	outcome := &cobra.Command{
		Use:   "outcome ESC-ID success|failure [--detail D]",
		Short: "Report how a decided operation went (feeds the learned decision cache; once per escalation)",
		Example: `  heed escalation outcome doc-esc-1 success
  heed escalation outcome doc-esc-1 failure --detail "the deploy rolled back"`,
		Args: cobra.ExactArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) == 1 {
				return completeChoices(events.OutcomeSuccess, events.OutcomeFailure)(cmd, args, toComplete)
			}
			return g.completeEscalations()(cmd, args, toComplete)
		},
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if err := idArg("escalation")(cmd, args); err != nil {
				return err
			}
			return oneOf("outcome", args[1], []string{events.OutcomeSuccess, events.OutcomeFailure})
		},
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			if by == "" {
				by = whoami()
			}
			r, err := c.ReportOutcome(cmd.Context(), command.ReportOutcome{ID: args[0], Outcome: args[1], Detail: detail, By: by})
			if err != nil {
				return err
			}
			if outJSON {
				printJSON(cmd.OutOrStdout(), r)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "escalation %s: outcome %s recorded\n", r.ID, args[1])
			return nil
		}),
	}
	outcome.Flags().StringVar(&detail, "detail", "", "what happened")
	outcome.Flags().StringVar(&by, "by", "", "who reports (default the current user)")
	outcome.Flags().BoolVar(&outJSON, "json", false, "JSON output")
	cmd.AddCommand(show, list, outcome)
	return cmd
}

// escalations reads every escalation's summary from heed_escalations,
// most recent first.
func escalations(ctx context.Context, c *client) ([]readmodel.Escalation, error) {
	m, err := heedclient.Values[readmodel.Escalation](ctx, c.Client, readmodel.EscalationsBucket, func(k string) bool { return strings.HasPrefix(k, "esc.") })
	if err != nil {
		return nil, err
	}
	out := make([]readmodel.Escalation, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b readmodel.Escalation) int {
		if c := b.RequestedAt.Compare(a.RequestedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// printEscalation prints an escalation's folded state, in the order it
// happened.
func printEscalation(w io.Writer, pal palette, st *command.EscalationState) {
	r := st.Request
	fmt.Fprintf(w, "escalation %s: %s\n", st.ID, pal.status(st.Status))
	if r.Title != "" {
		fmt.Fprintf(w, "%s\n", pal.bold(oneLine(r.Title)))
	}
	what := r.Operation
	if r.Scope != "" {
		what += " " + r.Scope
	}
	if r.Environment != "" {
		what += " in " + r.Environment
	}
	fmt.Fprintf(w, "  %s, session %s, asked by %s at %s\n", oneLine(what), oneLine(r.Session), oneLine(r.Requester), st.RequestedAt.Local().Format(time.DateTime))
	if r.Message != "" {
		fmt.Fprintf(w, "  %s\n", oneLine(firstLine(r.Message)))
	}
	if len(r.Approvers) > 0 {
		fmt.Fprintf(w, "  approvers: %s\n", oneLine(strings.Join(r.Approvers, ", ")))
	}
	if ro := st.Routed; ro != nil {
		printRouting(w, pal, command.EscalationReply{ID: st.ID, Status: st.Status, Routed: *ro}, false)
	}
	// Offers and escalations interleave: offer n, then what moved it on.
	for i, o := range st.Offers {
		members := "anyone"
		if len(o.Members) > 0 {
			members = strings.Join(o.Members, ", ")
		}
		fmt.Fprintf(w, "  offer %d: tier %s (%s), confirmation %s, deadline %s\n", o.Offer, o.Tier, members, o.ConfirmID, o.Deadline.Local().Format(time.DateTime))
		if i < len(st.Escalations) {
			printEscalated(w, st.Escalations[i])
		}
	}
	for _, e := range st.Escalations[min(len(st.Offers), len(st.Escalations)):] {
		printEscalated(w, e)
	}
	if st.Decided != nil {
		fmt.Fprint(w, "  ")
		printDecided(w, pal, st)
	}
	if o := st.Outcome; o != nil {
		d := ""
		if o.Detail != "" {
			d = ": " + o.Detail
		}
		fmt.Fprintf(w, "  outcome: %s by %s%s\n", o.Outcome, o.By, d)
	}
}

func printEscalated(w io.Writer, e events.EscalationEscalatedData) {
	to := e.ToTier
	if to == "" {
		to = "the final action"
	}
	extra := ""
	if len(e.Tried) > 0 {
		extra = " (tried " + strings.Join(e.Tried, ", ") + ")"
	}
	if e.By != "" {
		extra += " by " + e.By
	}
	fmt.Fprintf(w, "  escalated %d: %s → %s, %s%s\n", e.EscalationCount, e.FromTier, to, e.Reason, extra)
}

// completeEscalations offers escalation ids, the held ones first.
func (g *globals) completeEscalations() cobra.CompletionFunc {
	return onlyFirstArg(g.completeFrom(func(ctx context.Context, c *client, _ []string) []cobra.Completion {
		all, err := escalations(ctx, c)
		if err != nil {
			return nil
		}
		var held, rest []cobra.Completion
		for _, e := range all {
			comp := cobra.CompletionWithDesc(e.ID, fmt.Sprintf("%s %s %s, session %s", e.Status, e.Operation, e.Scope, e.Session))
			if e.Status == events.EscalationHeld {
				held = append(held, comp)
			} else {
				rest = append(rest, comp)
			}
		}
		out := append(held, rest...)
		return out[:min(len(out), completeMax)]
	}))
}

// completeSessions offers the sessions with held requests.
func (g *globals) completeSessions() cobra.CompletionFunc {
	return g.completeFrom(func(ctx context.Context, c *client, _ []string) []cobra.Completion {
		r, err := c.Held(ctx, "")
		if err != nil {
			return nil
		}
		var out []cobra.Completion
		for _, s := range r.Sessions {
			out = append(out, cobra.CompletionWithDesc(s.Session, fmt.Sprintf("%d held", s.Held)))
		}
		return out
	})
}
