package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/lib/service"

	"github.com/heedhq/heed/lib/runstate"
	"github.com/spf13/cobra"
)

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status [RUN-ID|ESCALATION-ID]",
		Short: "Show every service's health, a run's state step by step, or an escalation's",
		Long: `Without an argument: every heed service's health (heed.svc.<name>.health):
ok, degraded with the reasons (a durable consumer gone, lagging past the
threshold or stopped; not connected to NATS), or missing (no answer); and,
where the services run as separate processes, which instance is active (the
holder of its lease) and how many stand by. The exit status is 0 when every
service is ok, 1 otherwise.

With a run id: where the run stands: its status, each step's state and
attempt, what healing decided about a failed attempt, and what the run waits
for. The state is folded from the run's events in the log, exactly as the
runner and the healer fold it (lib/runstate). --json prints the folded state.

With an escalation id: its index entry (held, approved or denied, the
operation, the route, the tier, who decided and how, the outcome); heed audit
shows its whole story.`,
		Example: `  heed status
  heed status 01kmz3h7q8r2v5x9c4d6e8f0gt
  heed status 01kmz3h7q8r2v5x9c4d6e8f0gt --json | jq '.steps[] | {name, status}'`,
		Args:              cobra.RangeArgs(0, 1),
		ValidArgsFunction: g.completeRuns("running", "paused", "failed"),
		PreRunE: func(*cobra.Command, []string) error {
			if timeout <= 0 {
				return badInput("--timeout %s: use a positive duration (e.g. 2s)", timeout)
			}
			return nil
		},
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *client) error {
			if len(args) == 0 {
				return printServices(cmd.OutOrStdout(), g.palette(cmd), c.Health(cmd.Context(), timeout), asJSON)
			}
			out := cmd.OutOrStdout()
			// An escalation id: its index entry (heed audit tells the story).
			if x, ok, err := c.IndexEntry(cmd.Context(), "escalation", args[0]); err == nil && ok {
				if asJSON {
					printJSON(out, x)
					return nil
				}
				printEscalationEntry(out, g.palette(cmd), x)
				return nil
			}
			r, err := c.Run(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(out, r)
				return nil
			}
			printRunState(out, g.palette(cmd), r)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for each service's health")
	return cmd
}

// printServices prints every service's health; it returns an exit status
// 1 when any is degraded or missing.
func printServices(out io.Writer, pal palette, hs []heedclient.ServiceHealth, asJSON bool) error {
	bad := 0
	for _, h := range hs {
		if h.Status != service.StatusOK {
			bad++
		}
	}
	if asJSON {
		printJSON(out, hs)
	} else {
		t := newTable(out)
		t.row(pal.bold("SERVICE"), pal.bold("STATUS"), pal.bold("CONSUMERS"), pal.bold("LAG"), pal.bold("INSTANCES"), pal.bold("DETAIL"))
		for _, h := range hs {
			consumers, lag, detail := "", "", ""
			if h.Health != nil {
				n := uint64(0)
				for _, c := range h.Health.Consumers {
					n += c.Lag
				}
				consumers, lag = fmt.Sprint(len(h.Health.Consumers)), fmt.Sprint(n)
				detail = strings.Join(h.Health.Reasons, "; ")
			}
			if h.Error != "" {
				detail = strings.TrimPrefix(strings.Join([]string{detail, h.Error}, "; "), "; ")
			}
			t.row(h.Name, pal.status(strings.ToUpper(h.Status)), consumers, lag, instances(h), detail)
		}
		t.Flush()
	}
	if bad > 0 {
		return &exitError{status: exitFailure, code: codeDegraded, msg: fmt.Sprintf("%d of %d services not ok", bad, len(hs))}
	}
	return nil
}

// instances says which instance of a service is active and how many stand
// by: "pid 4242 on n1, 1 stand-by" (nothing for a service heed up runs).
func instances(h heedclient.ServiceHealth) string {
	var parts []string
	if h.Active != nil {
		parts = append(parts, fmt.Sprintf("pid %d on %s", h.Active.PID, h.Active.Host))
	}
	switch n := len(h.Standbys); n {
	case 0:
	case 1:
		parts = append(parts, "1 stand-by")
	default:
		parts = append(parts, fmt.Sprintf("%d stand-bys", n))
	}
	return strings.Join(parts, ", ")
}

func printRunState(out io.Writer, pal palette, r *runstate.Run) {
	driver := r.Driver
	if driver == "" {
		driver = "agent"
	}
	fmt.Fprintf(out, "run %s  ", r.ID)
	if r.SkillName != "" {
		fmt.Fprintf(out, "skill %s  ", r.SkillName)
	}
	fmt.Fprintf(out, "%s  (driven by %s", pal.status(strings.ToUpper(r.Status)), driver)
	if r.Agent != "" {
		fmt.Fprintf(out, ", agent %s", r.Agent)
	}
	fmt.Fprintln(out, ")")
	if r.SkillErr != nil {
		fmt.Fprintf(out, "  skill did not load: %s\n", firstLine(r.SkillErr.Error()))
	}
	for i, s := range r.Steps {
		name := s.Name
		if r.Skill != nil && i < len(r.Skill.Steps) {
			name = r.Skill.Steps[i].Name
		}
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		status := s.Status
		if status == runstate.StepPending {
			status = "pending"
		}
		line := fmt.Sprintf("  %-24s %s%s", truncate(name, 24), pal.status(status), strings.Repeat(" ", max(0, 10-len(status))))
		if s.Attempt > 1 {
			line += fmt.Sprintf(" attempt %d", s.Attempt)
		}
		if s.Error != nil {
			line += "  " + truncate(firstLine(s.Error.Message), 100)
		}
		if s.Answer != nil {
			line += fmt.Sprintf("  answered %q by %s (%s)", s.Answer.Choice, s.Answer.By, s.Answer.Method)
		}
		fmt.Fprintln(out, line)
		if s.Status == runstate.StepFailed {
			if h := r.Current(i); h.Triggered != nil || h.Decided() {
				fmt.Fprintf(out, "  %-24s %s\n", "", healSummary(h))
			}
		}
	}
	if r.Abandoned != nil {
		fmt.Fprintf(out, "abandoned: %s\n", truncate(r.Abandoned.Reason, 200))
	}
	if r.Paused != nil && !r.Terminal() {
		what := r.Paused.Reason
		if r.Paused.ConfirmID != "" {
			what += " " + r.Paused.ConfirmID
		}
		fmt.Fprintf(out, "waiting: %s at %s\n", what, r.Paused.Step)
	}
	if r.Failure != nil {
		fmt.Fprintf(out, "failed: %s\n", truncate(firstLine(r.Failure.Message), 200))
	}
}

func healSummary(a *runstate.Attempt) string {
	switch {
	case a.Retry != nil:
		return fmt.Sprintf("healing: retry as attempt %d (%s)", a.Retry.NextAttempt, a.Retry.Reason)
	case a.GaveUp:
		return "healing: gave up; on_error applies"
	case a.Declined:
		return "healing: the agent let on_error apply"
	case a.Escalated != nil:
		return "healing: handed to the agent " + a.Escalated.Agent
	case a.Triggered != nil:
		return "healing: in progress (" + a.Triggered.Plan + ")"
	}
	return ""
}
