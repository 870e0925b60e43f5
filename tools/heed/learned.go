package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/spf13/cobra"
)

func newFixesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "fixes", Short: "Show, teach and revoke learned fixes"}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List learned fixes with their confidence",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			fixes, err := c.Fixes(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				printJSON(out, fixes)
				return nil
			}
			if len(fixes) == 0 {
				fmt.Fprintln(out, "(no learned fixes)")
				return nil
			}
			fmt.Fprintf(out, "%-26s %-18s %-36s %-6s %-6s %s\n", "KEY", "TOOL", "ERROR", "CONF", "HEALED", "FIX")
			for _, f := range fixes {
				pattern := f.ErrorPattern
				if f.Match != "" {
					pattern = "contains " + f.Match
				}
				fmt.Fprintf(out, "%-26s %-18s %-36s %-6.2f %-6d %s (%s %s)\n", f.ID, truncate(f.Tool, 18), truncate(pattern, 36), f.Confidence, f.Healed, f.Description, f.Source, f.By)
			}
			return nil
		}),
	}
	list.Flags().BoolVar(&asJSON, "json", false, "JSON output")

	var toolName, pattern, description, rootCause, actionTool string
	var sets, actionArgs []string
	learn := &cobra.Command{
		Use:   "learn --tool TOOL --pattern TEXT --description WHAT [--set arg=value]... [--action-tool T --action-arg k=v...]",
		Short: "Teach a fix by hand: when TOOL fails with an error containing TEXT, apply it and retry",
		Long: `Teach the healer a fix. When TOOL fails with an error containing TEXT
(case-insensitive), the healer runs --action-tool (if given) and retries the
step with the --set args changed. Values may be templates over the failed
call: --set 'tag={{ args.tag + "-full" }}' ({{ error }} is the error text).
A taught fix starts at confidence 0.9 and beats the generic patterns.`,
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
			fmt.Fprintf(cmd.OutOrStdout(), "learned %s: %s failing with %q → %s\n", reply.ID, toolName, pattern, description)
			return nil
		},
	}
	learn.Flags().StringVar(&toolName, "tool", "", "the tool that fails")
	learn.Flags().StringVar(&pattern, "pattern", "", "text the error contains")
	learn.Flags().StringVar(&description, "description", "", "what the fix does")
	learn.Flags().StringVar(&rootCause, "root-cause", "", "why it happens")
	learn.Flags().StringArrayVar(&sets, "set", nil, "corrected arg as key=value (a template; repeatable)")
	learn.Flags().StringVar(&actionTool, "action-tool", "", "a tool to run before the retry")
	learn.Flags().StringArrayVar(&actionArgs, "action-arg", nil, "an arg of the action tool as key=value (repeatable)")

	var reason string
	forget := &cobra.Command{
		Use:   "forget KEY",
		Short: "Revoke a learned fix",
		Args:  cobra.ExactArgs(1),
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
			fmt.Fprintf(cmd.OutOrStdout(), "forgot %s\n", args[0])
			return nil
		},
	}
	forget.Flags().StringVar(&reason, "reason", "", "why")
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
}

func newStatsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Auto-heal rate, failures by type, fixes learned, patterns active, decisions, and the trend",
		Args:  cobra.NoArgs,
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
			sort.Slice(rep.Decisions, func(i, j int) bool { return rep.Decisions[i].Count > rep.Decisions[j].Count })
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
				for _, k := range kinds {
					fmt.Fprintf(out, "  %-12s %5d\n", k, rep.ByType[k])
				}
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
				fmt.Fprintln(out, "decisions (operation / scope: count, success rate, auto-approve candidate):")
				for _, d := range rep.Decisions {
					fmt.Fprintf(out, "  %-40s %-12s %4d  %5.1f%%  %v\n", truncate(d.Operation, 40), d.Scope, d.Count, d.SuccessRate*100, d.Candidate)
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	return cmd
}
