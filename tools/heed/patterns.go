package main

import (
	"fmt"
	"time"

	"github.com/heedhq/heed/events/readmodel"
	"github.com/spf13/cobra"
)

func newPatternsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "patterns", Short: "Show the usage patterns heed has learned from tool failures", Args: cobra.NoArgs,
		Example: `  heed patterns list`}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List usage patterns, most confident first (active ones warn before a matching call)",
		Long: `List the patterns the learner keeps of tool calls that failed: the tool, the
shape of the failing call's args, how often it recurred and how confident
heed is. An active pattern (confidence 0.7 or more, seen within the quiet
period) makes the runner warn before a call of the same shape (docs/HEALING.md).`,
		Example: `  heed patterns list
  heed patterns list --json | jq '.[] | select(.stage == "high") | .hint'`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(cmd *cobra.Command, _ []string, c *client) error {
			patterns, err := c.Patterns(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if patterns == nil {
					patterns = []readmodel.Pattern{}
				}
				printJSON(out, patterns)
				return nil
			}
			if len(patterns) == 0 {
				fmt.Fprintln(out, "(no patterns)")
				return nil
			}
			pal := g.palette(cmd)
			now := time.Now()
			t := newTable(out)
			t.row(pal.bold("TOOL"), pal.bold("KIND"), pal.bold("STAGE"), pal.bold("CONF"), pal.bold("SEEN"), pal.bold("LAST"), pal.bold("HINT"))
			for _, p := range patterns {
				stage := p.Stage
				if p.Active(now, 0) {
					stage = pal.paint(sgrYellow, stage+" (active)")
				} else {
					stage = pal.paint(sgrDefault, stage)
				}
				t.row(truncate(p.Tool, 24), p.Kind, stage, fmt.Sprintf("%.2f", p.Confidence), fmt.Sprint(p.Occurrences),
					humanDuration(now.Sub(p.LastSeen).Round(time.Second))+" ago", truncate(p.Hint, 80))
			}
			t.Flush()
			return nil
		}),
	}
	list.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	cmd.AddCommand(list)
	return cmd
}
