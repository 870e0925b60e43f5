package events

import (
	"regexp"
	"strings"
)

var (
	sigHex    = regexp.MustCompile(`\b[0-9a-f]{7,64}\b`)
	sigNum    = regexp.MustCompile(`\d+`)
	sigQuoted = regexp.MustCompile(`"[^"]*"|'[^']*'`)
	sigSpace  = regexp.MustCompile(`\s+`)
)

// ErrorSignature reduces an error message to what recurs: lower case, with
// hashes, numbers and quoted names replaced, so "manifest unknown:
// quay.io/x:abc1234" and "...:def5678" share one signature.
func ErrorSignature(msg string) string {
	s := strings.ToLower(strings.TrimSpace(msg))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	s = sigQuoted.ReplaceAllString(s, "<q>")
	s = sigHex.ReplaceAllString(s, "<h>")
	s = sigNum.ReplaceAllString(s, "<n>")
	s = sigSpace.ReplaceAllString(s, " ")
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}
