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
