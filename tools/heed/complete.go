package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/skill"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// completionTimeout bounds everything one completion does: a shell waits
// for it on every TAB, and heed may be down.
const completionTimeout = 1500 * time.Millisecond

// completeMax is the most ids offered at once.
const completeMax = 50

// completeFrom offers what list returns, read from a running heed through
// the client package. When heed is down or slow it offers nothing, in
// under completionTimeout, and never files.
func (g *globals) completeFrom(list func(ctx context.Context, c *client, args []string) []cobra.Completion) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		base := cmd.Context()
		if base == nil {
			base = context.Background()
		}
		ctx, cancel := context.WithTimeout(base, completionTimeout)
		defer cancel()
		natsOpts, err := g.natsOptions()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		hc, err := heedclient.Connect(ctx, g.natsURL, heedclient.Name("heed-cli-complete"), heedclient.Source("heed/cli"),
			heedclient.Timeout(completionTimeout), heedclient.NATSOptions(natsOpts), heedclient.NATSOptions{nats.Timeout(500 * time.Millisecond)})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer hc.Close()
		var out []cobra.Completion
		for _, s := range list(ctx, &client{hc}, args) {
			if strings.HasPrefix(s, toComplete) {
				out = append(out, s)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
	}
}

// onlyFirstArg completes the first positional argument and nothing after.
func onlyFirstArg(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd, args, toComplete)
	}
}

// completeRuns offers run ids, most recent first; the runs in one of
// first's statuses come before the others.
func (g *globals) completeRuns(first ...string) cobra.CompletionFunc {
	return onlyFirstArg(g.completeFrom(func(ctx context.Context, c *client, _ []string) []cobra.Completion {
		entries, err := c.Index(ctx, "run")
		if err != nil {
			return nil
		}
		return indexCompletions(entries, func(e readmodel.IndexEntry) bool {
			for _, s := range first {
				if e.Status == s {
					return true
				}
			}
			return false
		}, func(e readmodel.IndexEntry) string {
			return fmt.Sprintf("%s %s, step %s", e.Status, e.Skill, e.Step)
		})
	}))
}

// completeConfirmations offers confirmation ids, those waiting for an
// answer first.
func (g *globals) completeConfirmations() cobra.CompletionFunc {
	return onlyFirstArg(g.completeFrom(func(ctx context.Context, c *client, _ []string) []cobra.Completion {
		entries, err := c.Index(ctx, "confirm")
		if err != nil {
			return nil
		}
		return indexCompletions(entries, readmodel.IndexEntry.Open, func(e readmodel.IndexEntry) string {
			if e.Open() {
				return "waiting, run " + e.RunID
			}
			return fmt.Sprintf("%s %s, run %s", e.Status, e.Choice, e.RunID)
		})
	}))
}

// indexCompletions orders entries (most recent first) with the preferred
// ones before the rest, each with a description.
func indexCompletions(entries []readmodel.IndexEntry, preferred func(readmodel.IndexEntry) bool, describe func(readmodel.IndexEntry) string) []cobra.Completion {
	var a, b []cobra.Completion
	for _, e := range entries {
		c := cobra.CompletionWithDesc(e.ID, describe(e))
		if preferred(e) {
			a = append(a, c)
		} else {
			b = append(b, c)
		}
	}
	out := append(a, b...)
	if len(out) > completeMax {
		out = out[:completeMax]
	}
	return out
}

// completeAnswer completes `heed confirm answer ID CHOICE`: the waiting
// confirmations, then the chosen one's options.
func (g *globals) completeAnswer() cobra.CompletionFunc {
	ids := g.completeConfirmations()
	choices := g.completeFrom(func(ctx context.Context, c *client, args []string) []cobra.Completion {
		st, err := c.Confirmation(ctx, args[0])
		if err != nil || st.Request == nil {
			return nil
		}
		var out []cobra.Completion
		for _, o := range st.Request.Options {
			desc := o.Label
			if o.Value == st.Gate.Default {
				desc += " (default)"
			}
			out = append(out, cobra.CompletionWithDesc(o.Value, desc))
		}
		return out
	})
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			return ids(cmd, args, toComplete)
		case 1:
			return choices(cmd, args, toComplete)
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeFixes offers learned fix keys.
func (g *globals) completeFixes() cobra.CompletionFunc {
	return onlyFirstArg(g.completeFrom(func(ctx context.Context, c *client, _ []string) []cobra.Completion {
		fixes, _ := c.Fixes(ctx)
		var out []cobra.Completion
		for _, f := range fixes {
			out = append(out, cobra.CompletionWithDesc(f.ID, f.Tool+": "+f.Description))
		}
		return out
	}))
}

// completePrefs offers remembered choice keys.
func (g *globals) completePrefs() cobra.CompletionFunc {
	return onlyFirstArg(g.completeFrom(func(ctx context.Context, c *client, _ []string) []cobra.Completion {
		prefs, _ := c.Prefs(ctx)
		var out []cobra.Completion
		for _, p := range prefs {
			out = append(out, cobra.CompletionWithDesc(p.ID, p.Skill+" / "+p.Step+" → "+p.Choice))
		}
		return out
	}))
}

// completeSkillFiles offers skill files (*.yaml, *.yml); every argument
// is one for skill lint, only the first for run.
func completeSkillFiles(all bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if !all && len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return []cobra.Completion{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
	}
}

// completeChoices offers a fixed set of flag values.
func completeChoices(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeYAML offers *.yaml and *.yml files for a flag.
func completeYAML(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return []cobra.Completion{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
}

// completeRunChoices offers the options of the confirmation a paused run
// (the command's first argument) waits for.
func (g *globals) completeRunChoices() cobra.CompletionFunc {
	return g.completeFrom(func(ctx context.Context, c *client, args []string) []cobra.Completion {
		if len(args) == 0 {
			return nil
		}
		r, err := c.Run(ctx, args[0])
		if err != nil || r.Paused == nil || r.Paused.ConfirmID == "" {
			return nil
		}
		st, err := c.Confirmation(ctx, r.Paused.ConfirmID)
		if err != nil || st.Request == nil {
			return nil
		}
		var out []cobra.Completion
		for _, o := range st.Request.Options {
			out = append(out, cobra.CompletionWithDesc(o.Value, o.Label))
		}
		return out
	})
}

// completeInputs offers `name=` for each input the skill file (run's
// first argument) declares, the required ones first; once a name is
// typed, nothing (the value is the user's).
func completeInputs(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 || strings.Contains(toComplete, "=") {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	src, err := os.ReadFile(args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	sk, err := skill.Load(args[0], src)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var req, opt []cobra.Completion
	for _, in := range sk.Inputs {
		desc := in.Type
		if in.Description != "" {
			desc += ": " + in.Description
		}
		if in.Required {
			req = append(req, cobra.CompletionWithDesc(in.Name+"=", "required "+desc))
		} else {
			opt = append(opt, cobra.CompletionWithDesc(in.Name+"=", desc))
		}
	}
	return append(req, opt...), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveKeepOrder
}
