package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// result is what a section reports: tables, then lines that explain them.
type result struct {
	section section
	tables  []table
	notes   []string
	missed  bool // a target was missed
}

// table is one table of a result; the first column is a label, the others
// are figures (right-aligned in Markdown).
type table struct {
	caption string
	columns []string
	rows    [][]string
}

// machine names where the figures come from.
type machine struct {
	cpus      int
	goos      string
	goarch    string
	cpuModel  string
	goVersion string
	date      time.Time
}

func describeMachine() machine {
	return machine{
		cpus:      runtime.NumCPU(),
		goos:      runtime.GOOS,
		goarch:    runtime.GOARCH,
		cpuModel:  cpuModel(),
		goVersion: runtime.Version(),
		date:      time.Now(),
	}
}

func (m machine) line() string {
	model := m.cpuModel
	if model == "" {
		model = "unknown CPU"
	}
	return fmt.Sprintf("%d CPUs, %s/%s, %s, %s, nats-server %s, nats.go %s, %s",
		m.cpus, m.goos, m.goarch, model, m.goVersion, server.VERSION, nats.Version, m.date.Format("2006-01-02"))
}

// cpuModel is the first "model name" of /proc/cpuinfo, if there is one.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

func writeText(w io.Writer, m machine, results []*result) {
	fmt.Fprintf(w, "Machine: %s\n", m.line())
	for _, r := range results {
		fmt.Fprintf(w, "\n%s\n", r.section.title)
		for _, t := range r.tables {
			fmt.Fprintln(w)
			if t.caption != "" {
				fmt.Fprintln(w, t.caption)
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, strings.Join(t.columns, "\t"))
			for _, row := range t.rows {
				fmt.Fprintln(tw, strings.Join(row, "\t"))
			}
			tw.Flush()
		}
		fmt.Fprintln(w)
		for _, n := range r.notes {
			fmt.Fprintln(w, n)
		}
	}
}

func writeMarkdown(w io.Writer, m machine, cfg config, results []*result) {
	fmt.Fprintf(w, "Machine: %s. Embedded nats-server, file storage, %d rounds (median).\n", m.line(), cfg.rounds)
	for _, r := range results {
		fmt.Fprintf(w, "\n### %s\n", r.section.title)
		for _, t := range r.tables {
			fmt.Fprintln(w)
			if t.caption != "" {
				fmt.Fprintf(w, "%s\n\n", t.caption)
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(t.columns, " | "))
			seps := make([]string, len(t.columns))
			for i := range seps {
				seps[i] = "---"
				if i > 0 {
					seps[i] = "---:"
				}
			}
			fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
			for _, row := range t.rows {
				fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			}
		}
		if len(r.notes) > 0 {
			fmt.Fprintln(w)
			for _, n := range r.notes {
				fmt.Fprintf(w, "- %s\n", n)
			}
		}
	}
}

// median of xs (not modified); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

// thousands formats n with thousands separators: 123456 → "123,456".
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func micros(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 1, 64) + " µs"
}

func millis(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }
