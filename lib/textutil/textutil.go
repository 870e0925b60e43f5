// Package textutil shortens text for logs, events and terminals without
// cutting a UTF-8 character in half.
package textutil

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Ellipsis marks text that was cut.
const Ellipsis = "…"

// Truncate returns s cut to at most limit bytes at a character boundary,
// with Ellipsis appended when it was cut, and whether it was.
func Truncate(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	cut := max(0, limit)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis, true
}

// Cut is Truncate without the report.
func Cut(s string, limit int) string {
	t, _ := Truncate(s, limit)
	return t
}

// FirstLine is the first line of s (leading and trailing space trimmed),
// cut to at most limit bytes.
func FirstLine(s string, limit int) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return Cut(strings.TrimRight(l, "\r"), limit)
}

// DidYouMean returns the choices closest to typed (an edit or two away, or
// one a prefix of the other), best first, for a "did you mean" hint; none when
// nothing is close.
func DidYouMean(typed string, choices []string) []string {
	t := strings.ToLower(typed)
	if t == "" {
		return nil
	}
	type cand struct {
		s string
		d int
	}
	var cs []cand
	for _, c := range choices {
		lc := strings.ToLower(c)
		d := levenshtein(t, lc)
		if d <= 2 || (len(t) >= 2 && strings.HasPrefix(lc, t)) || (len(lc) >= 3 && strings.HasPrefix(t, lc)) {
			cs = append(cs, cand{c, d})
		}
	}
	// Insertion sort: a handful of choices.
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].d < cs[j-1].d; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.s
	}
	return out
}

// Hint is DidYouMean as a sentence to append to an error message:
// ` (did you mean "x"?)`, or "" when nothing is close.
func Hint(typed string, choices []string) string {
	s := DidYouMean(typed, choices)
	if len(s) == 0 {
		return ""
	}
	return ` (did you mean "` + s[0] + `"?)`
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// OneLine is s made safe to print as one line of a terminal: every
// control character (line breaks and tabs included, the escape that
// starts a terminal sequence, C1 controls) and every invisible character
// that changes how the line reads (direction marks and overrides, line
// and paragraph separators, a byte-order mark) is shown as its Go escape
// (\n, \x1b, \u202e), so text an agent wrote cannot clear the screen, fake
// a line or reorder what a person reads. Invalid UTF-8 shows as \ufffd.
func OneLine(s string) string { return escapeUnsafe(s, false) }

// Lines is OneLine for text of several lines (a confirmation's
// message): line breaks and tabs stay, a carriage return and everything
// else OneLine escapes is escaped the same way.
func Lines(s string) string { return escapeUnsafe(s, true) }

// escapeUnsafe shows every unsafe rune of s as its Go escape; with
// multiLine, line feeds and tabs stay as they are.
func escapeUnsafe(s string, multiLine bool) string {
	unsafe := func(r rune) bool { return unsafeRune(r) && !(multiLine && (r == '\n' || r == '\t')) }
	clean := true
	for _, r := range s {
		if unsafe(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !unsafe(r) {
			b.WriteRune(r)
			continue
		}
		switch r {
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r == utf8.RuneError, r == 0x061c, r == 0x200e, r == 0x200f, r == 0x2028, r == 0x2029, r == 0xfeff:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
