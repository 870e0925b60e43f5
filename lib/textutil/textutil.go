// Package textutil shortens text for logs, events and terminals without
// cutting a UTF-8 character in half.
package textutil

import (
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
