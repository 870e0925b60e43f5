package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/heedhq/heed/lib/service"
	"github.com/spf13/cobra"
)

// Set at link time by the Makefile (-ldflags -X main.version=… ); when
// empty, the build info Go records (vcs.revision, vcs.time) is used.
var (
	version string
	commit  string
	date    string
)

// buildInfo is what `heed version` reports.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"build_date"`
	Modified  bool   `json:"modified,omitempty"`
	Go        string `json:"go"`
	Platform  string `json:"platform"`
}

// currentBuild merges the link-time values over the build info.
func currentBuild() buildInfo {
	b := buildInfo{Version: service.Version, Commit: "unknown", BuildDate: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.BuildDate = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		b.Version = version
	}
	if commit != "" {
		b.Commit = commit
	}
	if date != "" {
		b.BuildDate = date
	}
	return b
}

func (b buildInfo) String() string {
	c := b.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if b.Modified {
		c += "-dirty"
	}
	when := b.BuildDate
	if t, err := time.Parse(time.RFC3339, when); err == nil {
		when = t.UTC().Format("2006-01-02 15:04 UTC")
	}
	return fmt.Sprintf("heed %s (commit %s, built %s, %s %s)", b.Version, c, when, b.Go, b.Platform)
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print heed's version, commit and build date",
		Example: `  heed version
  heed --version
  heed version --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := currentBuild()
			if asJSON {
				printJSON(cmd.OutOrStdout(), b)
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout(), b)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON output")
	return cmd
}
