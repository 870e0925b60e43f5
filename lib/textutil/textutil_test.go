package textutil

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateKeepsCharactersWhole(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	for n := 0; n <= len(s)+1; n++ {
		got, cut := Truncate(s, n)
		if !utf8.ValidString(got) {
			t.Fatalf("Truncate(%d) = %q: not valid UTF-8", n, got)
		}
		if cut != (n < len(s)) {
			t.Fatalf("Truncate(%d) reports cut=%v", n, cut)
		}
		if cut && len(strings.TrimSuffix(got, Ellipsis)) > n {
			t.Fatalf("Truncate(%d) kept %d bytes", n, len(got))
		}
	}
}

func TestFirstLine(t *testing.T) {
	for in, want := range map[string]string{
		"  one\ntwo":   "one",
		"crlf\r\nnext": "crlf",
		"":             "",
		"日本語のエラーメッセージ\n2": "日本語…",
	} {
		if got := FirstLine(in, 10); got != want {
			t.Errorf("FirstLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	levels := []string{"debug", "info", "warn", "error"}
	for _, c := range []struct {
		typed string
		want  string
	}{
		{"debg", ` (did you mean "debug"?)`},
		{"WARNING", ` (did you mean "warn"?)`},
		{"err", ` (did you mean "error"?)`},
		{"loud", ""},
		{"", ""},
	} {
		if got := Hint(c.typed, levels); got != c.want {
			t.Errorf("Hint(%q) = %q, want %q", c.typed, got, c.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, é and ✓":               "plain text, é and ✓",
		"t3\n  2) fake ✓ confirmed by boss": `t3\n  2) fake ✓ confirmed by boss`,
		"\x1b[2J\x1b[31mURGENT":             `\x1b[2J\x1b[31mURGENT`,
		"evil\u202eexe.txt":                 `evil\u202eexe.txt`,
		"nul\x00 del\x7f c1\u0085 tab\t":    `nul\x00 del\x7f c1\x85 tab\t`,
		"bad \xff byte":                     `bad \ufffd byte`,
	} {
		if got := OneLine(in); got != want {
			t.Errorf("OneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLines(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain\ntwo lines\tand a tab", "plain\ntwo lines\tand a tab"},
		{"Deploy to \u202eprod\u202c?\r\nok", `Deploy to \u202eprod\u202c?\r` + "\nok"},
		{"\x1b[2J\x1b[Hcleared\n\u2066isolated\u2069", `\x1b[2J\x1b[Hcleared` + "\n" + `\u2066isolated\u2069`},
		{"", ""},
	} {
		if got := Lines(c.in); got != c.want {
			t.Errorf("Lines(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
