package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/spf13/cobra"
)

func newAuditCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit ID",
		Short: "Show the ordered history of one run, confirmation or escalation, from the log",
		Long: `Show every event of one aggregate (a run, a confirmation or an escalation) in
log order, read from the event stream itself. For a run, the events of the
confirmations it asked for are merged in; for an escalation, the events of
each offer's confirmation (requested, answers and votes with who and where,
refused answers, expiry at the tier's timeout). --json prints the CloudEvents
in JSON format, one per line.`,
		Example: `  heed audit 01kmz3h7q8r2v5x9c4d6e8f0gt
  heed audit 01kmz3h7q8r2v5x9c4d6e8f0gt-s1-a1      # one confirmation
  heed audit esc-01kmz3h7q8r2v5x9c4d6e8f0gt          # one escalation
  heed audit 01kmz3h7q8r2v5x9c4d6e8f0gt --json | jq -r .type`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeRuns(),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			if !events.ValidID(id) {
				return events.Errorf(events.CodeInvalidRequest, "%q is not a valid run, confirmation or escalation id", id)
			}
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			type item struct {
				seq uint64
				ev  *events.Event
				bad error
				raw events.RawMsg
			}
			var items []item
			seen := map[uint64]bool{}
			read := func(filter string) error {
				_, err := events.ReadHistory(ctx, c.Bus().JetStream(), events.EventStream, filter, 0, func(raw events.RawMsg) error {
					if seen[raw.Seq] {
						return nil
					}
					seen[raw.Seq] = true
					ev, err := c.Bus().Codec().DecodeStored(raw)
					items = append(items, item{seq: raw.Seq, ev: ev, bad: err, raw: raw})
					return nil
				})
				return err
			}
			if err := read("heed.*." + id + ".>"); err != nil {
				return err
			}
			// Follow the confirmations a run asked for.
			var confirms []string
			for _, it := range items {
				if it.ev == nil {
					continue
				}
				var d struct {
					ConfirmID string `json:"confirm_id"`
				}
				if json.Unmarshal(it.ev.Data(), &d) == nil && d.ConfirmID != "" && d.ConfirmID != id {
					confirms = append(confirms, d.ConfirmID)
				}
			}
			for _, cid := range confirms {
				if err := read(events.SubjectFilter("confirm", cid)); err != nil {
					return err
				}
			}
			// And the change sets its queued calls were proposed as.
			sets := map[string]bool{}
			for _, it := range items {
				if it.ev == nil || events.Type(it.ev.Type()) != events.RunStepCompleted {
					continue
				}
				var d struct {
					Output struct {
						Items []string `json:"items"`
					} `json:"output"`
				}
				if json.Unmarshal(it.ev.Data(), &d) != nil {
					continue
				}
				for _, ref := range d.Output.Items {
					if set, _, ok := events.ParseChangeItemID(ref); ok && set != id {
						sets[set] = true
					}
				}
			}
			for _, set := range slices.Sorted(maps.Keys(sets)) {
				if err := read(events.SubjectFilter("changeset", set)); err != nil {
					return err
				}
			}
			if len(items) == 0 {
				return &events.Error{Code: events.CodeNotFound, Message: fmt.Sprintf("no events for %q in the log", id)}
			}
			sort.Slice(items, func(i, j int) bool { return items[i].seq < items[j].seq })
			out := cmd.OutOrStdout()
			if asJSON {
				for _, it := range items {
					if it.ev == nil {
						continue
					}
					b, err := json.Marshal(it.ev)
					if err != nil {
						return err
					}
					fmt.Fprintln(out, string(b))
				}
				return nil
			}
			pal := g.palette(cmd)
			for _, kind := range events.EventKinds() {
				if x, ok, err := c.IndexEntry(ctx, kind, id); err == nil && ok {
					fmt.Fprintf(out, "%s %s", x.Kind, x.ID)
					if x.Skill != "" {
						fmt.Fprintf(out, " (skill %s)", x.Skill)
					}
					if x.Kind == "escalation" {
						fmt.Fprint(out, escalationHeader(x))
					}
					status := x.Status
					if x.Kind == "changeset" {
						// The index says only that the set exists: its
						// status is the fold of its events (listed below).
						st := changeset.New(id)
						for _, it := range items {
							if it.ev != nil && it.ev.Subject() == id && events.Type(it.ev.Type()).Kind() == "changeset" {
								_, _ = changeset.Apply(st, it.ev, it.seq)
							}
						}
						if st.Status != "" {
							status = strings.ReplaceAll(st.Status, "_", " ")
						}
					}
					fmt.Fprintf(out, ": %s, %d %s, %s → %s\n", pal.status(status), x.Count, plural(x.Count, "event", "events"), x.First.Time.Local().Format("2006-01-02 15:04:05"), x.Last.Time.Local().Format("15:04:05"))
					if others := len(items) - x.Count; x.Count > 0 && others > 0 {
						fmt.Fprintf(out, "  (and %d %s of its confirmations and change sets)\n", others, plural(others, "event", "events"))
					}
				}
			}
			// Judge every answer as every reader does: only the first valid
			// one took effect.
			refused := map[uint64]string{}
			counted := map[uint64]string{} // votes towards a quorum
			folds := map[string]*confirmation.State{}
			for _, it := range items {
				if it.ev == nil || events.Type(it.ev.Type()).Kind() != "confirm" {
					continue
				}
				st := folds[it.ev.Subject()]
				if st == nil {
					st = confirmation.New(it.ev.Subject())
					folds[it.ev.Subject()] = st
				}
				r, err := st.Apply(it.ev, it.seq)
				switch {
				case err == nil && r != nil:
					refused[it.seq] = r.Reason
				case err == nil && events.Type(it.ev.Type()) == events.ConfirmAnswered:
					if a, ok := st.AnswerAt(it.seq); ok && a.Counted {
						counted[it.seq] = fmt.Sprintf("%d more for %s needed", st.Gate.Needed(a.Data.Choice), a.Data.Choice)
					}
				}
			}
			t := newTable(out)
			t.row(pal.bold("SEQ"), pal.bold("TIME"), pal.bold("EVENT"), pal.bold("AGGREGATE"), pal.bold("DETAIL"))
			for _, it := range items {
				if it.ev == nil {
					t.row(fmt.Sprint(it.seq), "", pal.red("INVALID"), it.raw.Subject, fmt.Sprintf("rejected: %v", it.bad))
					continue
				}
				detail, ok := summarizeEscalation(it.ev)
				if !ok {
					detail, ok = offerRequestSummary(it.ev)
				}
				if !ok {
					detail = summarize(it.ev)
				}
				if why, ok := refused[it.seq]; ok {
					detail += "  " + pal.red("✗ refused: "+why)
				}
				if why, ok := counted[it.seq]; ok {
					detail += "  vote counted: " + why
				}
				t.row(fmt.Sprint(it.seq), it.ev.Time().Local().Format("15:04:05.000"), pal.eventType(it.ev.Type()), it.ev.Subject(), detail)
			}
			t.Flush()
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print CloudEvents in JSON format, one per line")
	return cmd
}
