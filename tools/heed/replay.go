package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/learner"
	"github.com/spf13/cobra"
)

// projections are every KV projection heed keeps; replay rebuilds each.
func projections() []events.Projection {
	return append([]events.Projection{indexer.Projection{}}, learner.Projections()...)
}

func newReplayCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Rebuild every KV projection from the log into fresh buckets and compare with the live ones",
		Long: `Rebuild every KV projection from the event log into a fresh bucket
(<bucket>_replay, recreated each time) and compare it, key by key, with the
live bucket once the live projector has caught up. Exit status 1 if any
projection differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			out := cmd.OutOrStdout()
			differ := 0
			for _, p := range projections() {
				rep, err := events.Replay(ctx, c.Bus(), p, events.DefaultTopology())
				if err != nil {
					return fmt.Errorf("replay %s: %w", p.Name(), err)
				}
				if !rep.Identical() {
					differ++
				}
				if asJSON {
					b, _ := json.Marshal(rep)
					fmt.Fprintln(out, string(b))
					continue
				}
				verdict := "identical"
				if !rep.Identical() {
					verdict = "DIFFERENT"
				}
				fmt.Fprintf(out, "%-10s %s: %d events (%d rejected) up to seq %d → %d keys in %s: %s\n",
					rep.Projection, rep.Bucket, rep.Events, rep.Skipped, rep.LastSeq, rep.Keys, rep.ReplayedTo, verdict)
				show := func(label string, keys []string) {
					if len(keys) > 0 {
						fmt.Fprintf(out, "  %s (%d): %s\n", label, len(keys), strings.Join(first(keys, 20), ", "))
					}
				}
				show("missing from live", rep.Missing)
				show("only in live", rep.Extra)
				show("different", rep.Different)
			}
			if differ > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%d projection(s) differ from the log", differ)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON report per projection")
	return cmd
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}
