package main

import (
	"encoding/json"
	"fmt"
	"github.com/heedhq/heed/services/changesets"
	"github.com/heedhq/heed/services/escalator"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/learner"
	"github.com/spf13/cobra"
)

// projections are every KV projection heed keeps; replay rebuilds each.
func projections() []events.Projection {
	return append(append([]events.Projection{indexer.Projection{}}, learner.Projections()...), &escalator.Projection{}, &changesets.Projection{})
}

func newReplayCmd(g *globals) *cobra.Command {
	var asJSON, apply, keep bool
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Rebuild every KV projection from the log, compare with the live buckets, and repair them with --apply",
		Long: `Rebuild every KV projection from the event log (in memory) and compare
it, key by key, with the live bucket once the live projector has caught up.
Exit status 1 if any projection differs.

--apply swaps the rebuild in for the live keys that differ (writes the
missing and different ones, removes the extra ones) in one atomic batch per
bucket, guarded by the bucket's last sequence: a reader sees the old state
or the new, never a mix, and if the live projector (which keeps running)
writes meanwhile, the apply compares again and retries. Exit status 0 once
every bucket matches the log.

--keep also writes each rebuild to <bucket>_replay and leaves it there for
inspection; without it no scratch bucket remains.`,
		Example: `  heed replay
  heed replay --apply
  heed replay --json | jq -c '{projection, bucket, missing, extra, different}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			var opts []events.ReplayOption
			if apply {
				opts = append(opts, events.ReplayApply{})
			}
			if keep {
				opts = append(opts, events.ReplayKeep{})
			}
			out := cmd.OutOrStdout()
			differ := 0
			for _, p := range projections() {
				rep, err := events.Replay(ctx, c.Bus(), p, events.DefaultTopology(), opts...)
				if err != nil {
					return fmt.Errorf("replay %s: %w", p.Name(), err)
				}
				if !rep.Identical() && !apply {
					differ++
				}
				if asJSON {
					b, _ := json.Marshal(rep)
					fmt.Fprintln(out, string(b))
					continue
				}
				verdict := "identical"
				switch {
				case !rep.Identical() && apply:
					verdict = fmt.Sprintf("REPAIRED (%d %s changed)", rep.Applied, plural(rep.Applied, "key", "keys"))
				case !rep.Identical():
					verdict = "DIFFERENT"
				}
				where := ""
				if rep.ReplayedTo != "" {
					where = " in " + rep.ReplayedTo
				}
				fmt.Fprintf(out, "%-11s %s: %d events (%d skipped: refused by the gate or the projection) up to seq %d → %d keys%s: %s\n",
					rep.Projection, rep.Bucket, rep.Events, rep.Skipped, rep.LastSeq, rep.Keys, where, verdict)
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
				return &exitError{status: exitFailure, code: codeProjectionsDiffer, msg: fmt.Sprintf("%d projection(s) differ from the log (heed replay --apply repairs them)", differ)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON report per projection")
	cmd.Flags().BoolVar(&apply, "apply", false, "repair: swap the rebuilt keys in for the differing live ones, atomically per bucket")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep each rebuild in <bucket>_replay for inspection")
	return cmd
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
