// Package doctest extracts the shell commands shown in Markdown and writes
// them as one bash script, so that a test can run every documented command
// against a real heed and check what the docs say it prints.
//
// The rules a document follows:
//
//   - Every fenced block names its language. Blocks in sh, bash, shell or
//     console are commands; any other language (yaml, json, text…) is not
//     run. A block without a language is an error, so a new example is
//     never left out of the test by accident.
//   - A command block is run unless the line before its fence (blank lines
//     aside) is a marker: <!-- doc-test: skip (why it cannot run in a
//     test) --> leaves it out (the reason is required and reported);
//     <!-- doc-test: usage --> marks a synopsis whose lines are checked
//     against the command's --help instead of run.
//   - In sh blocks every line is a command (a trailing \ continues it;
//     lines starting with # are comments). A comment line starting with
//     "# →" right after a command is the output it prints (lines "#   …"
//     continue it). In console blocks, lines starting with "$ " are
//     commands and the lines after one are its output (stdout and stderr).
//   - <!-- doc-test: file NAME --> before a block that is not commands
//     (a skill, a tools file) writes its text to NAME in the test's
//     working directory, for the commands that use it.
//   - Shown output is a pattern: "…" matches any text, runs of spaces match
//     any run of spaces, and run ids, times, durations and merge request
//     numbers are normalised on both sides (Normalise), so a real run's
//     output can be shown as it was printed. Anything else that varies is
//     shown as "…".
//   - A command's trailing comment may say "exit N": the exit status it
//     must have; otherwise it must exit 0.
package doctest

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Kind of a fenced block.
type Kind int

const (
	Other Kind = iota // not commands (yaml, text, …)
	Run               // commands, run by the test
	Skip              // commands, not run (Reason says why)
	Usage             // a synopsis, checked against --help
)

// Block is one fenced block of a Markdown file.
type Block struct {
	File   string
	Line   int // the line of the opening fence, from 1
	Lang   string
	Kind   Kind
	Reason string // why a Skip block is not run
	// WriteTo names the file the block's text is written to before the
	// commands run (<!-- doc-test: file NAME -->), for the commands that
	// use it.
	WriteTo  string
	Body     string
	Commands []Command
}

// Command is one shell command of a block.
type Command struct {
	File string
	Line int
	Text string // the command as shown, continuation lines included
	Exit int    // the exit status it must have
	// Want is the output the docs show ("" when none is shown).
	Want    string
	Console bool // from a console block: Want is stdout and stderr together
}

func (c Command) String() string { return fmt.Sprintf("%s:%d: %s", c.File, c.Line, firstLine(c.Text)) }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

var (
	fenceRE  = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([^\\s`]*)")
	markerRE = regexp.MustCompile(`^<!--\s*doc-test:\s*(\S+)\s*(.*?)\s*-->\s*$`)
	exitRE   = regexp.MustCompile(`\bexit (\d+)\b`)
)

var commandLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// Parse returns every fenced block of a Markdown file.
func Parse(file string, src []byte) ([]Block, error) {
	var (
		blocks  []Block
		errs    []string
		marker  string // the last marker seen, until a non-blank line
		mline   int
		inBlock bool
		fence   string
		cur     Block
		body    []string
		lineNo  int
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if inBlock {
			if strings.HasPrefix(strings.TrimSpace(line), fence) && strings.Trim(strings.TrimSpace(line), fence[:1]) == "" {
				cur.Body = strings.Join(body, "\n")
				if err := cur.parseCommands(); err != nil {
					errs = append(errs, err.Error())
				}
				blocks = append(blocks, cur)
				inBlock, body = false, nil
				continue
			}
			body = append(body, line)
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			inBlock, fence = true, m[2]
			cur = Block{File: file, Line: lineNo, Lang: m[3]}
			switch {
			case cur.Lang == "":
				errs = append(errs, fmt.Sprintf("%s:%d: a fenced block without a language: say sh (or console) for commands, text for output or diagrams", file, lineNo))
			case !commandLangs[cur.Lang]:
				cur.Kind = Other
				if marker != "" {
					mm := markerRE.FindStringSubmatch(marker)
					if mm[1] == "file" && validFileName(mm[2]) {
						cur.WriteTo = mm[2]
					} else {
						errs = append(errs, fmt.Sprintf("%s:%d: before a %s block, which is never run, a doc-test marker can only be <!-- doc-test: file NAME --> (a plain file name)", file, mline, cur.Lang))
					}
				}
			default:
				cur.Kind = Run
				if marker != "" {
					mm := markerRE.FindStringSubmatch(marker)
					switch mm[1] {
					case "skip":
						cur.Kind, cur.Reason = Skip, strings.TrimSuffix(strings.TrimPrefix(mm[2], "("), ")")
						if cur.Reason == "" {
							errs = append(errs, fmt.Sprintf("%s:%d: doc-test: skip needs a reason: <!-- doc-test: skip (why) -->", file, mline))
						}
					case "usage":
						cur.Kind = Usage
					case "file":
						errs = append(errs, fmt.Sprintf("%s:%d: doc-test: file is for blocks that are not commands (yaml, text…)", file, mline))
					default:
						errs = append(errs, fmt.Sprintf("%s:%d: unknown doc-test marker %q (skip or usage)", file, mline, mm[1]))
					}
				}
			}
			marker = ""
			continue
		}
		t := strings.TrimSpace(line)
		switch {
		case markerRE.MatchString(t):
			marker, mline = t, lineNo
		case strings.HasPrefix(t, "<!--") && strings.Contains(t, "doc-test"):
			errs = append(errs, fmt.Sprintf("%s:%d: a doc-test marker must be one line: <!-- doc-test: skip (why) -->", file, lineNo))
		case t != "":
			if marker != "" {
				errs = append(errs, fmt.Sprintf("%s:%d: a doc-test marker not followed by a fenced block", file, mline))
			}
			marker = ""
		}
	}
	if inBlock {
		errs = append(errs, fmt.Sprintf("%s:%d: a fenced block that never ends", file, cur.Line))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return blocks, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return blocks, nil
}

var fileNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// validFileName: a file the doc test may write in its working directory.
func validFileName(name string) bool { return fileNameRE.MatchString(name) }

// parseCommands splits a command block into commands.
func (b *Block) parseCommands() error {
	if b.Kind == Other {
		return nil
	}
	lines := strings.Split(b.Body, "\n")
	console := b.Lang == "console"
	var cmd *Command
	var want []string
	inWant := false
	flush := func() {
		if cmd != nil {
			cmd.Want = strings.TrimSpace(strings.Join(want, "\n"))
			b.Commands = append(b.Commands, *cmd)
		}
		cmd, want, inWant = nil, nil, false
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		n := b.Line + 1 + i
		t := strings.TrimSpace(line)
		if console {
			if !strings.HasPrefix(line, "$ ") {
				if cmd == nil && t != "" {
					return fmt.Errorf("%s:%d: console block: output before any \"$ \" command", b.File, n)
				}
				want = append(want, line)
				continue
			}
			flush()
			text, end := joinContinued(lines, i, strings.TrimPrefix(line, "$ "))
			cmd = &Command{File: b.File, Line: n, Text: text, Console: true, Exit: exitOf(text)}
			i = end
			continue
		}
		switch {
		case t == "":
			inWant = false
		case strings.HasPrefix(t, "# →"):
			if cmd == nil {
				return fmt.Errorf("%s:%d: shown output before any command", b.File, n)
			}
			want = append(want, strings.TrimSpace(strings.TrimPrefix(t, "# →")))
			inWant = true
		case inWant && strings.HasPrefix(t, "#   "):
			want = append(want, strings.TrimSpace(strings.TrimPrefix(t, "#")))
		case strings.HasPrefix(t, "#"):
			inWant = false
		default:
			flush()
			text, end := joinContinued(lines, i, line)
			cmd = &Command{File: b.File, Line: n, Text: text, Exit: exitOf(text)}
			i = end
		}
	}
	flush()
	if len(b.Commands) == 0 {
		return fmt.Errorf("%s:%d: a %s block with no command", b.File, b.Line, b.Lang)
	}
	return nil
}

// joinContinued returns the command starting at lines[i] (first its text
// there) with every line a trailing backslash continues, and the index of
// its last line.
func joinContinued(lines []string, i int, first string) (string, int) {
	text := first
	for strings.HasSuffix(strings.TrimRight(text, " "), "\\") && i+1 < len(lines) {
		i++
		text += "\n" + lines[i]
	}
	return text, i
}

// exitOf reads "exit N" from a command's trailing comment.
func exitOf(text string) int {
	c := trailingComment(text)
	if m := exitRE.FindStringSubmatch(c); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// trailingComment returns the text after the first # that starts a shell
// comment (preceded by a blank, outside quotes) on the command's last line.
func trailingComment(text string) string {
	var single, double bool
	last := text
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		// Quotes do not span lines in the docs' commands.
		last = text[i+1:]
	}
	for i := 0; i < len(last); i++ {
		switch c := last[i]; {
		case c == '\'' && !double:
			single = !single
		case c == '"' && !single:
			double = !double
		case c == '#' && !single && !double && (i == 0 || last[i-1] == ' ' || last[i-1] == '\t'):
			return last[i+1:]
		}
	}
	return ""
}

// Match reports whether got matches the shown output want: "…" matches any
// text (newlines included), a run of blanks any run of blanks, leading and
// trailing blanks of every line and of the whole are ignored, and what
// differs from one run to the next is normalised on both sides (see
// Normalise), so the docs may show a real run's ids, times and durations.
func Match(want, got string) bool {
	return Pattern(want).MatchString(Normalise(got))
}

// Pattern is the regular expression Match uses for want.
func Pattern(want string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for i, part := range strings.Split(Normalise(want), "…") {
		if i > 0 {
			b.WriteString(`.*?`)
		}
		q := regexp.QuoteMeta(part)
		b.WriteString(blanksRE.ReplaceAllString(q, `[ \t]+`))
	}
	b.WriteString(`\z`)
	return regexp.MustCompile(b.String())
}

var (
	blanksRE = regexp.MustCompile(`[ \t]+`)
	// What varies between runs: ids (ULIDs, as heed's run ids, and the
	// MR numbers of the example tools), times and durations.
	normalisers = []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`\b01[0-9a-hjkmnp-tv-z]{24}\b`), "<ULID>"},
		{regexp.MustCompile(`\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?`), "<TIME>"},
		{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`), "<DURATION>"},
		{regexp.MustCompile(`merge_requests/\d+`), "merge_requests/<N>"},
	}
)

// Normalise trims every line and the whole, and replaces run ids, times,
// durations and merge request numbers with placeholders.
func Normalise(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	s = strings.TrimSpace(strings.Join(lines, "\n"))
	for _, n := range normalisers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return s
}

// Hooks adapt a script to the test that runs it.
type Hooks struct {
	// Rewrite adapts a command (ports, placeholders) before it is written.
	Rewrite func(string) string
	// Prelude is shell code run before the first command.
	Prelude string
	// After is shell code run after each command, with $__out naming its
	// stdout file, $__rc its exit status and $__cmd its text.
	After string
	// Limit is how long one command may take (0: no limit): a command
	// still running then is stopped (SIGTERM, with every other child of
	// the shell) and $DOCTEST_DIR/<i>.timeout written, and the script goes
	// on with the next command.
	Limit time.Duration
}

// Script writes cmds as one bash script. Every command runs in the same
// shell (variables and functions carry over, as for a reader typing them
// in order) with stdin from /dev/null, its stdout, stderr and exit status
// written to $DOCTEST_DIR/<i>.out, <i>.err and <i>.rc, and
// $DOCTEST_DIR/started naming the command that runs now.
func Script(cmds []Command, h Hooks) string {
	var b strings.Builder
	b.WriteString("#!/usr/bin/env bash\n# Written by tools/internal/doctest from the docs' command blocks.\n")
	b.WriteString("__d=\"$DOCTEST_DIR\"\n")
	// The watchdog: a subshell that, after the limit, marks the command
	// and stops the shell's other children (the command, and whatever it
	// left in the background).
	b.WriteString(`__watch() { local me=$$; ( sleep "$1"; echo timeout >"$__d/$2.timeout"; for p in $(pgrep -P "$me"); do [ "$p" != "$BASHPID" ] && kill "$p"; done ) >/dev/null 2>&1 & __wpid=$!; }` + "\n")
	b.WriteString(`__unwatch() { kill "$__wpid" 2>/dev/null; wait "$__wpid" 2>/dev/null; }` + "\n")
	b.WriteString(h.Prelude)
	b.WriteString("\n")
	for i, c := range cmds {
		text := c.Text
		if h.Rewrite != nil {
			text = h.Rewrite(text)
		}
		fmt.Fprintf(&b, "\n# %s:%d\necho %d >\"$__d/started\"\n", c.File, c.Line, i)
		if h.Limit > 0 {
			fmt.Fprintf(&b, "__watch %d %d\n", int((h.Limit+time.Second-1)/time.Second), i)
		}
		fmt.Fprintf(&b, "{ %s\n} >\"$__d/%d.out\" ", text, i)
		if c.Console {
			b.WriteString("2>&1")
		} else {
			fmt.Fprintf(&b, "2>\"$__d/%d.err\"", i)
		}
		fmt.Fprintf(&b, " </dev/null\n__rc=$?\n")
		if h.Limit > 0 {
			b.WriteString("__unwatch\n")
		}
		fmt.Fprintf(&b, "echo $__rc >\"$__d/%d.rc\"\n", i)
		if h.After != "" {
			fmt.Fprintf(&b, "__out=\"$__d/%d.out\"\n__cmd=%s\n%s\n", i, shellQuote(text), h.After)
		}
	}
	b.WriteString("\necho done >\"$__d/started\"\nkill $(jobs -p) 2>/dev/null\nexit 0\n")
	return b.String()
}

// shellQuote quotes s for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var inlineRE = regexp.MustCompile("`((?:bin/)?heed [^`]+|nats [^`]+)`")

// Inline returns the heed and nats commands shown in code spans of the
// prose (outside fenced blocks), such as `heed replay --apply` or
// `nats micro ls`. Most are fragments (with placeholders, or commands that
// follow until interrupted), but the commands and flags they name must
// exist, and the read-only ones can run.
func Inline(file string, src []byte) []Command {
	// Blank out fenced blocks, keeping the newlines for line numbers.
	lines := strings.Split(string(src), "\n")
	fence := ""
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case fence == "":
			if m := fenceRE.FindStringSubmatch(l); m != nil {
				fence, lines[i] = m[2], ""
			}
		default:
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			lines[i] = ""
		}
	}
	text := strings.Join(lines, "\n")
	var out []Command
	for _, m := range inlineRE.FindAllStringSubmatchIndex(text, -1) {
		span := strings.Join(strings.Fields(text[m[2]:m[3]]), " ")
		out = append(out, Command{File: file, Line: 1 + strings.Count(text[:m[0]], "\n"), Text: strings.TrimPrefix(span, "bin/")})
	}
	return out
}
