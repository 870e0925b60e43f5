package main

import (
	"fmt"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/spf13/cobra"
)

func newPrefsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "prefs", Short: "Show and revoke remembered choices", Args: cobra.NoArgs,
		Example: `  heed prefs list
  heed prefs forget pref-e0365688ce1d99253b3e`}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List remembered choices (what heed answers without asking)",
		Example: `  heed prefs list
  heed prefs list --json | jq -r '.[] | "\(.id) \(.choice)"'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			prefs, err := c.Prefs(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if prefs == nil {
					prefs = []readmodel.Pref{}
				}
				printJSON(out, prefs)
				return nil
			}
			if len(prefs) == 0 {
				fmt.Fprintln(out, "(no remembered choices)")
				return nil
			}
			pal := g.palette(cmd)
			t := newTable(out)
			t.row(pal.bold("KEY"), pal.bold("SCOPE"), pal.bold("FOR"), pal.bold("CHOICE"), pal.bold("SET BY"))
			for _, p := range prefs {
				what := p.Skill + " / " + p.Step
				if p.Scope == events.ScopeError {
					what = p.Tool + ": " + p.ErrorPattern
				}
				t.row(p.ID, p.Scope, truncate(what, 48), pal.bold(p.Choice), fmt.Sprintf("%s at %s", p.By, p.SetAt.Local().Format("2006-01-02 15:04")))
			}
			t.Flush()
			return nil
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	var reason string
	var forgetJSON bool
	forget := &cobra.Command{
		Use:               "forget KEY",
		Short:             "Revoke a remembered choice: heed asks again",
		Example:           `  heed prefs forget pref-e0365688ce1d99253b3e --reason "ask me again for releases"`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completePrefs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			if !events.ValidID(id) {
				return events.Errorf(events.CodeInvalidRequest, "%q is not a preference key (see heed prefs list)", id)
			}
			c, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			p, ok, err := c.Pref(ctx, id)
			if err != nil {
				return err
			}
			if !ok {
				return events.Errorf(events.CodeNotFound, "no remembered choice %q (see heed prefs list)", id)
			}
			ev, err := events.NewEvent(events.PrefForgotten, id, fmt.Sprintf("%s/forget/%s", id, p.LearnedFrom), "heed/cli", events.PrefForgottenData{By: whoami(), Reason: reason})
			if err != nil {
				return err
			}
			if _, err := c.Bus().Publish(ctx, &ev); err != nil {
				return err
			}
			if forgetJSON {
				printJSON(cmd.OutOrStdout(), struct {
					ID string `json:"id"`
					events.PrefForgottenData
				}{id, events.PrefForgottenData{By: whoami(), Reason: reason}})
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "forgot %s: heed will ask again\n", id)
			return nil
		},
	}
	forget.Flags().StringVar(&reason, "reason", "", "why (recorded in the log)")
	forget.Flags().BoolVar(&forgetJSON, "json", false, "JSON output")
	cmd.AddCommand(list, forget)
	return cmd
}
