package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/spf13/cobra"
)

func newFixesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "fixes", Short: "Show, teach and revoke learned fixes", Args: cobra.NoArgs,
		Example: `  heed fixes list
  heed fixes learn --tool quay_check --pattern "manifest unknown" --set 'tag={{ args.tag + "-full" }}' --description "use the full tag"
  heed fixes forget fix-2b1e7331eb77d7800a3b`}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List learned fixes with their confidence",
		Example: `  heed fixes list
  heed fixes list --json | jq '.[] | select(.confidence < 0.5) | .id'`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			fixes, err := c.Fixes(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if fixes == nil {
					fixes = []readmodel.Fix{}
				}
				printJSON(out, fixes)
				return nil
			}
			if len(fixes) == 0 {
				fmt.Fprintln(out, "(no learned fixes)")
				return nil
			}
			pal := g.palette(cmd)
			t := newTable(out)
			t.row(pal.bold("KEY"), pal.bold("TOOL"), pal.bold("ERROR"), pal.bold("CONF"), pal.bold("HEALED"), pal.bold("FIX"))
			for _, f := range fixes {
				pattern := f.ErrorPattern
				if f.Match != "" {
					pattern = "contains " + f.Match
				}
				conf := fmt.Sprintf("%.2f", f.Confidence)
				if f.Usable() {
					conf = pal.green(conf)
				} else {
					conf = pal.red(conf)
				}
				t.row(f.ID, truncate(f.Tool, 24), truncate(pattern, 40), conf, fmt.Sprint(f.Healed), fmt.Sprintf("%s (%s %s)", oneLine(f.Description), f.Source, oneLine(f.By)))
			}
			t.Flush()
			return nil
		}),
	}
	list.Flags().BoolVar(&asJSON, "json", false, "JSON output")

	var toolName, pattern, description, rootCause, actionTool string
	var learnJSON bool
	var sets, actionArgs []string
	learn := &cobra.Command{
		Use:   "learn --tool TOOL --pattern TEXT --description WHAT [--set arg=value]... [--action-tool T --action-arg k=v...]",
		Short: "Teach a fix by hand: when TOOL fails with an error containing TEXT, apply it and retry",
		Long: `Teach the healer a fix. When TOOL fails with an error containing TEXT
(case-insensitive), the healer runs --action-tool (if given) and retries the
step with the --set args changed. Values may be templates over the failed
call: --set 'tag={{ args.tag + "-full" }}' ({{ error }} is the error text).
A taught fix starts at confidence 0.9 and beats the generic patterns.`,
		Example: `  heed fixes learn --tool quay_check --pattern "manifest unknown" \
    --set 'tag={{ args.tag + "-full" }}' --description "use the full image tag"
  heed fixes learn --tool kube_scale --pattern "Unauthorized" \
    --action-tool kube_login --action-arg cluster=stage \
    --description "log in to the cluster, then scale again"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var missing []string
			for _, f := range []struct{ name, v string }{{"--tool", toolName}, {"--pattern", pattern}, {"--description", description}} {
				if f.v == "" {
					missing = append(missing, f.name)
				}
			}
			if len(missing) > 0 {
				return usageError(cmd, fmt.Errorf("%s required", strings.Join(missing, ", ")))
			}
			patch, err := parseKV(sets, true)
			if err != nil {
				return err
			}
			aargs, err := parseKV(actionArgs, true)
			if err != nil {
				return err
			}
			if len(patch) == 0 && actionTool == "" {
				return usageError(cmd, errors.New("a fix needs --set args and/or an --action-tool"))
			}
			if len(aargs) > 0 && actionTool == "" {
				return usageError(cmd, errors.New("--action-arg needs --action-tool"))
			}
			c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.close()
			req := command.LearnFix{Tool: toolName, Match: pattern, Description: description, RootCause: rootCause, By: whoami()}
			if len(patch) > 0 {
				req.ArgsPatch = patch
			}
			if actionTool != "" {
				req.Action = &events.FixAction{Tool: actionTool, Args: aargs}
			}
			// The healer checks the tools and templates: it would apply the fix.
			reply, err := c.LearnFix(cmd.Context(), req)
			if err != nil {
				return err
			}
			if learnJSON {
				printJSON(cmd.OutOrStdout(), reply)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "learned %s: %s failing with %q → %s\n", reply.ID, toolName, pattern, description)
			return nil
		},
	}
	learn.Flags().BoolVar(&learnJSON, "json", false, "print the learned fix as JSON")
	learn.Flags().StringVar(&toolName, "tool", "", "the tool that fails")
	learn.Flags().StringVar(&pattern, "pattern", "", "text the error contains")
	learn.Flags().StringVar(&description, "description", "", "what the fix does")
	learn.Flags().StringVar(&rootCause, "root-cause", "", "why it happens")
	learn.Flags().StringArrayVar(&sets, "set", nil, "corrected arg as key=value (a template; repeatable)")
	learn.Flags().StringVar(&actionTool, "action-tool", "", "a tool to run before the retry")
	learn.Flags().StringArrayVar(&actionArgs, "action-arg", nil, "an arg of the action tool as key=value (repeatable)")

	var reason string
	var forgetJSON bool
	forget := &cobra.Command{
		Use:               "forget KEY",
		Short:             "Revoke a learned fix",
		Example:           `  heed fixes forget fix-2b1e7331eb77d7800a3b --reason "the registry was fixed"`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeFixes(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !events.ValidID(args[0]) {
				return badInput("%q is not a fix key (heed fixes list shows them)", args[0])
			}
			c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer c.close()
			if _, err := c.ForgetFix(cmd.Context(), command.ForgetFix{ID: args[0], Reason: reason, By: whoami()}); err != nil {
				return err
			}
			if forgetJSON {
				printJSON(cmd.OutOrStdout(), struct {
					ID string `json:"id"`
					events.FixForgottenData
				}{args[0], events.FixForgottenData{By: whoami(), Reason: reason}})
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "forgot %s\n", args[0])
			return nil
		},
	}
	forget.Flags().StringVar(&reason, "reason", "", "why")
	forget.Flags().BoolVar(&forgetJSON, "json", false, "JSON output")
	cmd.AddCommand(list, learn, forget)
	return cmd
}

// statsReport is `heed stats`: the seed's memory_stats.
type statsReport struct {
	AutoHealRate   float64                     `json:"auto_heal_rate"`
	TotalFailures  int                         `json:"total_failures"`
	AutoFixed      int                         `json:"auto_fixed"`
	AgentFixed     int                         `json:"agent_fixed"`
	ManualRequired int                         `json:"manual_required"`
	GaveUp         int                         `json:"gave_up"`
	ByType         map[string]int              `json:"by_type"`
	FixesLearned   int                         `json:"fixes_learned"`
	FixesActive    int                         `json:"fixes_active"`
	PatternsActive int                         `json:"patterns_active"`
	Patterns       int                         `json:"patterns"`
	Daily          map[string]readmodel.Period `json:"daily"`
	Weekly         map[string]readmodel.Period `json:"weekly"`
	Decisions      []readmodel.Decision        `json:"decisions"`
	Escalations    escalationReport            `json:"escalations"`
	ChangeSets     []changeToolReport          `json:"change_sets"`
}

// changeToolReport is one agent's items of one tool in heed stats: what
// people decided, and whether the agent keeps proposing what is rejected.
type changeToolReport struct {
	Agent string `json:"agent"`
	Tool  string `json:"tool"`
	readmodel.ToolDecisions
	KeepsProposingRejected bool `json:"keeps_proposing_rejected"`
}

// escalationReport is the Escalations section of heed stats.
type escalationReport struct {
	Requested int            `json:"requested"`
	Routed    map[string]int `json:"routed"`
	Decided   map[string]int `json:"decided"`
	Escalated map[string]int `json:"escalated"`
	Approved  int            `json:"approved"`
	Denied    int            `json:"denied"`
	// Avoided of DecidedTotal were decided without a person.
	Avoided      int                                   `json:"avoided"`
	DecidedTotal int                                   `json:"decided_total"`
	AvoidedShare float64                               `json:"avoided_share"`
	Successes    int                                   `json:"successes"`
	Failures     int                                   `json:"failures"`
	Daily        map[string]readmodel.EscalationPeriod `json:"daily"`
}

func newEscalationReport(st readmodel.EscalationStats) escalationReport {
	r := escalationReport{Requested: st.Requested, Routed: st.Routed, Decided: st.Decided, Escalated: st.Escalated,
		Approved: st.Approved, Denied: st.Denied, Avoided: st.Avoided, AvoidedShare: st.AvoidedShare(),
		Successes: st.Successes, Failures: st.Failures, Daily: st.Daily}
	for _, n := range st.Decided {
		r.DecidedTotal += n
	}
	for _, m := range []*map[string]int{&r.Routed, &r.Decided, &r.Escalated} {
		if *m == nil {
			*m = map[string]int{}
		}
	}
	if r.Daily == nil {
		r.Daily = map[string]readmodel.EscalationPeriod{}
	}
	return r
}

// print writes the Escalations section; nothing when there were none.
func (r escalationReport) print(out io.Writer) {
	if r.Requested == 0 && r.DecidedTotal == 0 {
		return
	}
	fmt.Fprintln(out, "Escalations:")
	fmt.Fprintf(out, "  escalations avoided: %d of %d (%.1f%%)  decided without a person: rules, conditional rules, the learned cache\n", r.Avoided, r.DecidedTotal, r.AvoidedShare*100)
	fmt.Fprintf(out, "  requested %d  approved %d  denied %d  held %d\n", r.Requested, r.Approved, r.Denied, max(0, r.Requested-r.DecidedTotal))
	line := func(label string, m map[string]int, keys ...string) {
		var parts []string
		for _, k := range keys {
			if m[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(out, "  %-13s %s\n", label, strings.Join(parts, "  "))
		}
	}
	line("routed:", r.Routed, events.RouteAutoApprove, events.RouteConditionalApprove, events.RouteCachedApprove, events.RouteEscalate, events.RouteDeny)
	line("decided by:", r.Decided, events.EscMethodRule, events.EscMethodCache, events.MethodUser, events.EscMethodFinalAction)
	line("escalated:", r.Escalated, events.EscalateTimeout, events.EscalateUnreachable, events.EscalatePassed)
	if r.Successes+r.Failures > 0 {
		fmt.Fprintf(out, "  outcomes:     success %d  failure %d\n", r.Successes, r.Failures)
	}
	days := make([]string, 0, len(r.Daily))
	for d := range r.Daily {
		days = append(days, d)
	}
	sort.Strings(days)
	if len(days) > 14 {
		days = days[len(days)-14:]
	}
	for _, d := range days {
		p := r.Daily[d]
		share := 0.0
		if p.Decided > 0 {
			share = float64(p.Avoided) / float64(p.Decided) * 100
		}
		fmt.Fprintf(out, "  %s  requested %5d  decided %5d  avoided %5d  (%5.1f%%)\n", d, p.Requested, p.Decided, p.Avoided, share)
	}
}

func newStatsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Auto-heal rate, failures by type, fixes learned, patterns active, decisions, escalations avoided, and the trend",
		Example: `  heed stats
  heed stats --json | jq .auto_heal_rate`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			var rep statsReport
			ctx := cmd.Context()
			st, err := c.Stats(ctx)
			if err != nil {
				return err
			}
			rep.AutoHealRate, rep.TotalFailures, rep.AutoFixed, rep.AgentFixed = st.AutoHealRate(), st.TotalFailures, st.AutoFixed, st.AgentFixed
			rep.ManualRequired, rep.GaveUp, rep.ByType, rep.FixesLearned = st.ManualRequired, st.GaveUp, st.ByType, st.FixesLearned
			rep.Daily, rep.Weekly = st.Daily, st.Weekly
			fixes, err := c.Fixes(ctx)
			if err != nil {
				return err
			}
			for _, f := range fixes {
				if f.Usable() {
					rep.FixesActive++
				}
			}
			patterns, err := c.Patterns(ctx)
			if err != nil {
				return err
			}
			now := time.Now()
			for _, p := range patterns {
				rep.Patterns++
				if p.Active(now, 0) {
					rep.PatternsActive++
				}
			}
			if rep.Decisions, err = c.Decisions(ctx); err != nil {
				return err
			}
			// By count; ties keep the client's order (operation,
			// environment, scope), so the listing is the same every time.
			sort.SliceStable(rep.Decisions, func(i, j int) bool { return rep.Decisions[i].Count > rep.Decisions[j].Count })
			est, err := c.EscalationStats(ctx)
			if err != nil {
				return err
			}
			rep.Escalations = newEscalationReport(est)
			cst, err := c.ChangeStats(ctx)
			if err != nil {
				return err
			}
			rep.ChangeSets = []changeToolReport{}
			for _, a := range cst {
				tools := make([]string, 0, len(a.Tools))
				for t := range a.Tools {
					tools = append(tools, t)
				}
				sort.Strings(tools)
				for _, t := range tools {
					d := a.Tools[t]
					rep.ChangeSets = append(rep.ChangeSets, changeToolReport{Agent: a.Agent, Tool: t, ToolDecisions: d, KeepsProposingRejected: d.KeepsProposingRejected()})
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				printJSON(out, rep)
				return nil
			}
			fmt.Fprintf(out, "auto-heal rate     %5.1f%%  (%d of %d failures healed without anyone)\n", rep.AutoHealRate*100, rep.AutoFixed, rep.TotalFailures)
			fmt.Fprintf(out, "healed by agents   %5d\nhanded to agents   %5d\nnot healed         %5d\n", rep.AgentFixed, rep.ManualRequired, rep.GaveUp)
			fmt.Fprintf(out, "fixes learned      %5d  (%d usable)\npatterns active    %5d  (of %d)\n", rep.FixesLearned, rep.FixesActive, rep.PatternsActive, rep.Patterns)
			if len(rep.ByType) > 0 {
				var kinds []string
				for k := range rep.ByType {
					kinds = append(kinds, k)
				}
				sort.Strings(kinds)
				fmt.Fprintln(out, "failures by type:")
				t := newTable(out)
				for _, k := range kinds {
					t.row("", oneLine(k), fmt.Sprintf("%5d", rep.ByType[k]))
				}
				t.Flush()
			}
			if days := st.SortedDays(); len(days) > 0 {
				fmt.Fprintln(out, "trend (per day):")
				if len(days) > 14 {
					days = days[len(days)-14:]
				}
				for _, d := range days {
					p := rep.Daily[d]
					rate := 0.0
					if p.Total > 0 {
						rate = float64(p.AutoFixed) / float64(p.Total) * 100
					}
					fmt.Fprintf(out, "  %s  failures %5d  auto-fixed %5d  (%5.1f%%)\n", d, p.Total, p.AutoFixed, rate)
				}
			}
			if len(rep.Decisions) > 0 {
				fmt.Fprintln(out, "decisions:")
				t := newTable(out)
				t.row("", "OPERATION", "ENVIRONMENT", "SCOPE", "COUNT", "SUCCESS", "AUTO-APPROVE CANDIDATE")
				for _, d := range rep.Decisions {
					cand := fmt.Sprint(d.Candidate)
					if d.Suspended {
						cand += " (suspended: a failure; a person must approve again)"
					}
					env, scope := d.Environment, d.Scope
					if env == "" {
						env = "-"
					}
					if scope == "" {
						scope = "-"
					}
					success := fmt.Sprintf("%5.1f%%", d.SuccessRate*100)
					if d.Successes+d.Failures == 0 {
						success = "    -" // no outcome reported yet (the rate counts as 1)
					}
					t.row("", truncate(d.Operation, 48), env, scope, fmt.Sprintf("%5d", d.Count), success, cand)
				}
				t.Flush()
			}
			rep.Escalations.print(out)
			printChangeStats(out, rep.ChangeSets)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	return cmd
}

// printChangeStats is the change-set section of heed stats: per agent and
// tool, what people decided and applied; a tool whose items the agent
// keeps proposing although they are rejected (3 rejections in a row) is
// flagged with the last reason given.
func printChangeStats(out io.Writer, rows []changeToolReport) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out, "change sets (per agent and tool):")
	t := newTable(out)
	t.row("", "AGENT", "TOOL", "PROPOSED", "CONFIRMED", "REJECTED", "DEFERRED", "EXPIRED", "APPLIED", "FAILED", "")
	for _, r := range rows {
		note := ""
		if r.KeepsProposingRejected {
			note = fmt.Sprintf("keeps proposing what is rejected (%d in a row", r.RejectedStreak)
			if r.LastReason != "" {
				note += fmt.Sprintf("; last reason: %q", truncate(r.LastReason, 60))
			}
			note += ")"
		}
		t.row("", truncate(r.Agent, 24), r.Tool, fmt.Sprintf("%5d", r.Proposed), fmt.Sprintf("%5d", r.Confirmed), fmt.Sprintf("%5d", r.Rejected),
			fmt.Sprintf("%5d", r.Deferred), fmt.Sprintf("%5d", r.Expired), fmt.Sprintf("%5d", r.Applied), fmt.Sprintf("%5d", r.Failed), note)
	}
	t.Flush()
}
