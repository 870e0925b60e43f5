package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func newDocsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "docs",
		Short:   "Generate documentation of the CLI (man pages)",
		Example: `  heed docs man ./man/man1`,
		Args:    cobra.NoArgs,
	}
	var section string
	man := &cobra.Command{
		Use:   "man DIR",
		Short: "Write a man page for every heed command into DIR",
		Long: `Write one man page per command (heed.1, heed-run.1, heed-confirm-answer.1…)
into DIR, created if missing. Read one with man -l DIR/heed-run.1, or put DIR
on MANPATH (its man1 directory) and run man heed-run.`,
		Example: `  heed docs man ./man/man1
  MANPATH=$PWD/man man heed-run
  man -l ./man/man1/heed.1`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: fmt.Sprintf("man page directory: %v", err)}
			}
			root := cmd.Root()
			// A fixed date keeps the pages reproducible: the build date
			// of this binary, not the time the pages were written.
			hdr := &doc.GenManHeader{Title: "HEED", Section: section, Source: "heed " + currentBuild().Version, Manual: "heed manual"}
			root.DisableAutoGenTag = true
			if t, err := time.Parse(time.RFC3339, currentBuild().BuildDate); err == nil {
				hdr.Date = &t
			}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return err
			}
			n, _ := filepath.Glob(filepath.Join(dir, "*."+section))
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d man pages to %s\n", len(n), dir)
			return nil
		},
	}
	man.Flags().StringVar(&section, "section", "1", "man section")
	cmd.AddCommand(man)
	return cmd
}
