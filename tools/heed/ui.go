package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// palette colours words for a terminal; off, it returns them unchanged.
// Colour is on only when the output is a terminal, NO_COLOR is unset
// (https://no-color.org) and --no-color was not given.
type palette struct{ on bool }

// paletteFor decides colour for one output stream.
func paletteFor(w io.Writer, noColor bool) palette {
	if noColor || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return palette{}
	}
	return palette{on: isTerminal(w)}
}

// SGR colours, all two digits: every painted cell of a table column then
// has the same number of invisible bytes, so tabwriter still aligns it.
const (
	sgrBold    = "01"
	sgrRed     = "31"
	sgrGreen   = "32"
	sgrYellow  = "33"
	sgrBlue    = "34"
	sgrDim     = "90"
	sgrDefault = "39"
)

func (p palette) paint(code, s string) string {
	if !p.on {
		return s
	}
	return "\033[" + code + "m" + s + "\033[0m"
}

func (p palette) bold(s string) string  { return p.paint(sgrBold, s) }
func (p palette) red(s string) string   { return p.paint(sgrRed, s) }
func (p palette) green(s string) string { return p.paint(sgrGreen, s) }
func (p palette) dim(s string) string   { return p.paint(sgrDim, s) }

// status colours a run, step, confirmation or service status word by
// what it means: done well, in progress or waiting, gone wrong.
func (p palette) status(s string) string {
	switch strings.ToLower(s) {
	case "completed", "ok", "answered", "healed", "succeeded":
		return p.paint(sgrGreen, s)
	case "failed", "missing", "degraded", "abandoned", "error":
		return p.paint(sgrRed, s)
	case "paused", "waiting", "pending", "expired", "cancelled", "requested":
		return p.paint(sgrYellow, s)
	case "running", "started":
		return p.paint(sgrBlue, s)
	}
	return p.paint(sgrDefault, s)
}

// humanDuration prints a duration as people read it: 250ms, 7.1s, 3m12s,
// 2h5m.
func humanDuration(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d == 0:
		return "0s"
	case d < time.Millisecond:
		return neg + d.Round(time.Microsecond).String()
	case d < time.Second-500*time.Microsecond:
		return neg + d.Round(time.Millisecond).String()
	case d < 9950*time.Millisecond: // below what rounds to 10.0s
		return neg + fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute-500*time.Millisecond:
		return neg + fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour-500*time.Millisecond:
		d = d.Round(time.Second)
		return neg + fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	if d < 48*time.Hour-30*time.Second {
		d = d.Round(time.Minute)
		return neg + fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	d = d.Round(time.Hour)
	return neg + fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// msDuration turns a JSON number of milliseconds into a readable duration.
func msDuration(v any) string {
	switch x := v.(type) {
	case float64:
		return humanDuration(time.Duration(x * float64(time.Millisecond)))
	case int64:
		return humanDuration(time.Duration(x) * time.Millisecond)
	case int:
		return humanDuration(time.Duration(x) * time.Millisecond)
	}
	return ""
}

// table collects rows and prints them with aligned columns. It measures
// the visible width of each cell (colour codes and multi-byte runes
// aside), which text/tabwriter cannot do for coloured cells.
type table struct {
	w    io.Writer
	rows [][]string
}

func newTable(w io.Writer) *table { return &table{w: w} }

// row adds one row of cells.
func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

// Flush prints the rows: every column but the last padded to its widest
// cell, two spaces apart.
func (t *table) Flush() {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], visibleWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		b.Reset()
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-visibleWidth(c)+2))
			}
		}
		fmt.Fprintln(t.w, strings.TrimRight(b.String(), " "))
	}
	t.rows = nil
}

// visibleWidth is the number of runes of s outside ANSI escape sequences.
func visibleWidth(s string) int {
	n, esc := 0, false
	for _, r := range s {
		switch {
		case esc:
			if r >= '@' && r <= '~' && r != '[' {
				esc = false
			}
		case r == '\033':
			esc = true
		default:
			n++
		}
	}
	return n
}

// eventType prints an event type without its "heed." prefix, coloured by
// what it tells: a failure, a success, a question.
func (p palette) eventType(t string) string {
	short := shortType(t)
	switch {
	case strings.HasSuffix(t, ".failed"), strings.HasSuffix(t, ".abandoned"), strings.HasSuffix(t, ".refused"), strings.HasSuffix(t, ".gave_up"):
		return p.paint(sgrRed, short)
	case strings.HasSuffix(t, ".completed"), strings.HasSuffix(t, ".healed"), strings.HasSuffix(t, ".answered"):
		return p.paint(sgrGreen, short)
	case strings.HasSuffix(t, ".paused"), strings.HasSuffix(t, ".requested"), strings.HasSuffix(t, ".warning"), strings.HasSuffix(t, ".cancelled"):
		return p.paint(sgrYellow, short)
	}
	return short
}
