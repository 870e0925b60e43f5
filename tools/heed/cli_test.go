package main

// Tests of the CLI conventions: --version, --json with snake_case keys on
// every command that prints data, shell completion read from a running
// heed (and quick when heed is down), man pages, examples in every help,
// readable durations and aligned tables.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// cliTools are the tools of the CLI tests: one that works, one that
// always fails (the healer cannot heal it: the run fails).
const cliTools = `tools:
  say:
    description: print a small JSON object
    command: /bin/sh
    args: ["-c", "echo '{\"said\": \"{{ args.word }}\"}'"]
    timeout: 10s
  boom:
    description: always fails
    command: /bin/sh
    args: ["-c", "echo 'the widget is broken beyond repair' >&2; exit 3"]
    timeout: 10s
`

const cliAskSkill = `name: cli_ask
description: say a word, then ask
inputs:
  word: {type: string, default: hello}
steps:
  - name: say
    tool: say
    args: {word: "{{ inputs.word }}"}
    output: said
  - name: approve
    confirm:
      message: "Go ahead?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: 300
    output: decision
summary: "chose {{ decision }}"
`

const cliFailSkill = `name: cli_fail
description: fails
steps:
  - name: explode
    tool: boom
`

// startHeedCLI runs `heed up` with a tools file and waits until it is
// ready; it returns the URL and the directory holding the skills.
func startHeedCLI(t *testing.T) (url, dir string) {
	t.Helper()
	dir = t.TempDir()
	for name, src := range map[string]string{"tools.yaml": cliTools, "ask.yaml": cliAskSkill, "fail.yaml": cliFailSkill} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	p := startProc(t, "heed up", "up", "--data", filepath.Join(dir, "data"), "--nats-listen", listen, "--tools", filepath.Join(dir, "tools.yaml"), "--sweep-every", "1s", "--sweep-quiet", "1s")
	p.waitOutput("ready", 30*time.Second)
	return "nats://" + listen, dir
}

// upperKeys returns the paths of the object keys in v that hold an
// upper-case letter, except below the keys whose values are user data
// (inputs, args, outputs, contexts) and in maps keyed by data (days,
// weeks, consumer names).
func upperKeys(v any, path string) []string {
	return upperKeysIn(v, path, false)
}

func upperKeysIn(v any, path string, keyedByData bool) []string {
	var bad []string
	switch x := v.(type) {
	case map[string]any:
		for k, y := range x {
			if !keyedByData && strings.ToLower(k) != k {
				bad = append(bad, path+"."+k)
			}
			switch k {
			case "inputs", "args", "output", "context", "args_patch", "when_was", "data":
				continue // user data, or a CloudEvent's payload (checked by its schema)
			}
			byData := false
			switch k {
			case "daily", "weekly", "by_type", "consumers", "checks", "attempts":
				byData = !keyedByData
			}
			bad = append(bad, upperKeysIn(y, path+"."+k, byData)...)
		}
	case []any:
		for _, y := range x {
			bad = append(bad, upperKeysIn(y, path+"[]", false)...)
		}
	}
	return bad
}

// parseJSONOutput parses one JSON document or one per line.
func parseJSONOutput(out string) ([]any, error) {
	var one any
	if err := json.Unmarshal([]byte(out), &one); err == nil {
		return []any{one}, nil
	}
	var docs []any
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var d any
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			return nil, fmt.Errorf("line %d is not JSON: %v: %q", i+1, err, line)
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// TestJSONOnEveryDataCommand runs every command that prints data with
// --json against a real heed up: the output parses as JSON, has the
// fields a script needs, and no key has an upper-case letter.
func TestJSONOnEveryDataCommand(t *testing.T) {
	t.Parallel()
	url, dir := startHeedCLI(t)
	ask, fail := filepath.Join(dir, "ask.yaml"), filepath.Join(dir, "fail.yaml")
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append([]string{"--nats-url", url}, args...)...)
	}
	// jsonOf runs one command, requires the exit status want, and returns
	// its parsed JSON documents after checking their keys.
	jsonOf := func(want int, args ...string) []any {
		t.Helper()
		out, errOut, code := cli(args...)
		if code != want {
			t.Fatalf("heed %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
		docs, err := parseJSONOutput(out)
		if err != nil || len(docs) == 0 {
			t.Fatalf("heed %s: output is not JSON (%v):\n%s", strings.Join(args, " "), err, out)
		}
		for _, d := range docs {
			if bad := upperKeys(d, ""); len(bad) > 0 {
				t.Errorf("heed %s: keys with upper case: %v\n%s", strings.Join(args, " "), bad, out)
			}
		}
		return docs
	}
	field := func(doc any, k string) string {
		m, _ := doc.(map[string]any)
		return fmt.Sprint(m[k])
	}

	jsonOf(0, "version", "--json")

	// A run that completes: the final state on stdout, progress on stderr.
	done := jsonOf(0, "run", ask, "-i", "word=hi", "--yes", "--json")[0]
	if field(done, "status") != "completed" || field(done, "id") == "" {
		t.Errorf("run --yes --json: %v", done)
	}
	doneID := field(done, "id")

	// The same, for people: durations as people read them.
	out, errOut, code := cli("run", ask, "--yes")
	human := regexp.MustCompile(`^(\d+(µs|ms)|\d\.\ds|\d+s|\d+m\d\ds)$`)
	m := regexp.MustCompile(`(?m)^✓ say \((\S+)\)`).FindStringSubmatch(out)
	m2 := regexp.MustCompile(`(?m)^run completed in (\S+)$`).FindStringSubmatch(out)
	if code != 0 || m == nil || m2 == nil || !human.MatchString(m[1]) || !human.MatchString(m2[1]) {
		t.Errorf("heed run: exit %d, want durations like 250ms or 7.1s:\n%s%s", code, out, errOut)
	}

	// A run that waits for its confirmation.
	waiting := jsonOf(0, "run", ask, "--detach", "--json")[0]
	runID := field(waiting, "run_id")
	var confirmID string
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		docs := jsonOf(0, "confirm", "list", "--json")
		for _, e := range docs[0].([]any) {
			if field(e, "run_id") == runID {
				confirmID = field(e, "id")
				return nil
			}
		}
		return fmt.Errorf("no waiting confirmation of run %s yet", runID)
	})
	jsonOf(0, "confirm", "list", "--all", "--json")
	if v := jsonOf(0, "confirm", "show", confirmID, "--json")[0]; field(v, "status") != "waiting" {
		t.Errorf("confirm show --json: status %q, want waiting: %v", field(v, "status"), v)
	}
	if a := jsonOf(0, "confirm", "answer", confirmID, "proceed", "--json")[0]; field(a, "choice") != "proceed" || field(a, "id") != confirmID {
		t.Errorf("confirm answer --json: %v", a)
	}

	// The terminal's confirm command, told to proceed.
	another := field(jsonOf(0, "run", ask, "--detach", "--json")[0], "run_id")
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		out, errOut, code := cli("confirm", another+"-s1-a1", "--yes", "--json")
		if code != 0 {
			return fmt.Errorf("confirm --yes: exit %d: %s", code, errOut)
		}
		docs, err := parseJSONOutput(out)
		if err != nil || field(docs[0], "choice") != "proceed" {
			return fmt.Errorf("confirm --yes --json: %v %q", err, out)
		}
		if bad := upperKeys(docs[0], ""); len(bad) > 0 {
			t.Errorf("confirm --yes --json: keys with upper case: %v", bad)
		}
		return nil
	})

	// A run that fails, then a retry of its failed step.
	failed := jsonOf(3, "run", fail, "--json")[0]
	if field(failed, "status") != "failed" {
		t.Errorf("run --json of a failing skill: %v", failed)
	}
	if r := jsonOf(0, "retry", field(failed, "id"), "--reason", "test", "--json")[0]; field(r, "run_id") != field(failed, "id") {
		t.Errorf("retry --json: %v", r)
	}

	// A run continued as its agent, and one cancelled.
	cont := field(jsonOf(0, "run", ask, "--detach", "--json")[0], "run_id")
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		out, errOut, code := cli("continue", cont, "--choice", "cancel", "--json")
		if code != 0 {
			return fmt.Errorf("continue: exit %d: %s", code, errOut)
		}
		if docs, err := parseJSONOutput(out); err != nil || field(docs[0], "run_id") != cont {
			return fmt.Errorf("continue --json: %v %q", err, out)
		}
		return nil
	})
	cancelled := field(jsonOf(0, "run", ask, "--detach", "--json")[0], "run_id")
	if c := jsonOf(0, "cancel", cancelled, "--reason", "test", "--json")[0]; field(c, "run_id") != cancelled {
		t.Errorf("cancel --json: %v", c)
	}

	runs := jsonOf(0, "runs", "--json")[0].([]any)
	if len(runs) < 4 {
		t.Errorf("runs --json: %d runs, want at least 4", len(runs))
	}
	if got := jsonOf(0, "runs", "--status", "completed", "--json")[0].([]any); len(got) == 0 || field(got[0], "status") != "completed" {
		t.Errorf("runs --status completed --json: %v", got)
	}
	if got := jsonOf(0, "runs", "--status", "abandoned", "--json")[0]; got == nil {
		t.Errorf("runs --json with no match printed null, want []")
	}
	jsonOf(0, "status", "--json")
	if st := jsonOf(0, "status", doneID, "--json")[0]; field(st, "status") != "completed" {
		t.Errorf("status RUN --json: %v", st)
	}
	if evs := jsonOf(0, "audit", doneID, "--json"); len(evs) < 5 {
		t.Errorf("audit --json: %d events", len(evs))
	}
	jsonOf(0, "stats", "--json")
	jsonOf(0, "prefs", "list", "--json")
	if f := jsonOf(0, "fixes", "learn", "--tool", "boom", "--pattern", "broken beyond", "--set", "force=true", "--description", "force it", "--json")[0]; !strings.HasPrefix(field(f, "id"), "fix-") {
		t.Errorf("fixes learn --json: %v", f)
	}
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if fixes := jsonOf(0, "fixes", "list", "--json")[0].([]any); len(fixes) != 1 {
			return fmt.Errorf("fixes list --json: %v", fixes)
		}
		return nil
	})
	jsonOf(0, "patterns", "list", "--json")
	fixID := field(jsonOf(0, "fixes", "list", "--json")[0].([]any)[0], "id")
	if got, _ := complete(t, url, "fixes", "forget", ""); !slices.Equal(got, []string{fixID}) {
		t.Errorf("fixes forget <TAB> = %v, want [%s]", got, fixID)
	}
	if f := jsonOf(0, "fixes", "forget", fixID, "--json")[0]; field(f, "id") != fixID {
		t.Errorf("fixes forget --json: %v", f)
	}
	// events tail --json: one CloudEvent per line, as they enter the log.
	tail := startProc(t, "heed events tail", "--nats-url", url, "events", "tail", "--all", "--json")
	tail.waitOutput(doneID, 20*time.Second)
	tail.stop(syscall.SIGINT)
	lines := strings.Split(strings.TrimSpace(tail.stdout.String()), "\n")
	for _, line := range lines {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Errorf("events tail --json: a line is not JSON: %v: %q", err, line)
			continue
		}
		if bad := upperKeys(ev, ""); len(bad) > 0 || ev["specversion"] != "1.0" {
			t.Errorf("events tail --json: keys with upper case %v, or not a CloudEvent: %q", bad, line)
		}
	}
	if r := jsonOf(0, "replay", "--json"); len(r) < 2 {
		t.Errorf("replay --json: %d reports", len(r))
	}
	if l := jsonOf(0, "skill", "lint", "--json", ask)[0].([]any); field(l[0], "ok") != "true" {
		t.Errorf("skill lint --json: %v", l)
	}
}

// complete runs `heed __complete ARGS…` (what a shell runs on TAB) and
// returns the values offered and the directive.
func complete(t *testing.T, url string, args ...string) ([]string, string) {
	t.Helper()
	out, errOut, code := runCLI(t, append([]string{"--nats-url", url, "__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("heed __complete %v: exit %d\n%s%s", args, code, out, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var vals []string
	for _, l := range lines[:len(lines)-1] {
		v, _, _ := strings.Cut(l, "\t")
		vals = append(vals, v)
	}
	return vals, lines[len(lines)-1]
}

// TestCompletion: TAB offers the run ids, the waiting confirmations first,
// a confirmation's choices, skill files and the values of enum flags, read
// from a real heed up; with heed down it offers nothing, at once.
func TestCompletion(t *testing.T) {
	t.Parallel()
	url, dir := startHeedCLI(t)
	ask := filepath.Join(dir, "ask.yaml")
	out, errOut, code := runCLI(t, "--nats-url", url, "run", ask, "--yes", "--json")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	var done struct{ ID string }
	if err := json.Unmarshal([]byte(out), &done); err != nil {
		t.Fatal(err)
	}
	out, _, _ = runCLI(t, "--nats-url", url, "run", ask, "--detach", "--json")
	var paused struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(out), &paused); err != nil {
		t.Fatal(err)
	}
	// Wait until the second run asks, and its confirmation is indexed.
	var confirms []string
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		confirms, _ = complete(t, url, "confirm", "answer", "")
		if len(confirms) != 2 || !strings.HasPrefix(confirms[0], paused.RunID) {
			return fmt.Errorf("confirm answer <TAB> = %v, want the waiting confirmation of %s first, then the answered one", confirms, paused.RunID)
		}
		return nil
	})
	if !strings.HasPrefix(confirms[1], done.ID) {
		t.Errorf("confirm answer <TAB> = %v, want the answered confirmation of %s second", confirms, done.ID)
	}

	cases := []struct {
		args []string
		want []string
		dir  string // the directive line
	}{
		{[]string{"audit", ""}, []string{paused.RunID, done.ID}, ":36"},
		{[]string{"status", paused.RunID[:4]}, []string{paused.RunID, done.ID}, ":36"},
		{[]string{"cancel", ""}, []string{paused.RunID, done.ID}, ":36"},
		{[]string{"audit", paused.RunID, ""}, nil, ":4"}, // one argument only
		{[]string{"confirm", "answer", confirms[0], ""}, []string{"proceed", "cancel"}, ":36"},
		{[]string{"confirm", "show", ""}, confirms, ":36"},
		{[]string{"continue", paused.RunID, "--choice", ""}, []string{"proceed", "cancel"}, ":36"},
		{[]string{"runs", "--status", ""}, runStatuses, ":4"},
		{[]string{"up", "--log-level", ""}, []string{"debug", "info", "warn", "error"}, ":4"},
		{[]string{"confirm", "answer", confirms[0], "proceed", "--remember", ""}, []string{"skill_step", "error", "ask_again"}, ":4"},
		{[]string{"run", ""}, []string{"yaml", "yml"}, ":8"},
		{[]string{"skill", "lint", ask, ""}, []string{"yaml", "yml"}, ":8"},
		{[]string{"run", ask, "-i", ""}, []string{"word="}, ":38"},
		{[]string{"run", ask, "-i", "word="}, nil, ":4"},
	}
	for _, c := range cases {
		got, directive := complete(t, url, c.args...)
		if !slices.Equal(got, c.want) || directive != c.dir {
			t.Errorf("heed %v<TAB> = %v %s, want %v %s", c.args, got, directive, c.want, c.dir)
		}
	}

	// Heed down: nothing is offered, and the shell is not kept waiting.
	start := time.Now()
	got, directive := complete(t, "nats://127.0.0.1:1", "audit", "")
	if len(got) != 0 || directive != ":4" {
		t.Errorf("with heed down: audit <TAB> = %v %s, want nothing, :4", got, directive)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("with heed down a completion took %s", took)
	}
}

// TestVersion: --version and heed version name the version, the commit and
// the build date; the link-time values override the build info.
func TestVersion(t *testing.T) {
	out, _, code := runCLI(t, "--version")
	if code != 0 || !regexp.MustCompile(`^heed \S+ \(commit \S+, built .+\)\n$`).MatchString(out) {
		t.Errorf("heed --version: exit %d: %q", code, out)
	}
	out2, _, _ := runCLI(t, "version")
	if out2 != out {
		t.Errorf("heed version = %q, heed --version = %q", out2, out)
	}
	version, commit, date = "v9.9.9", "0123456789abcdef0123456789abcdef01234567", "2026-01-02T03:04:05Z"
	defer func() { version, commit, date = "", "", "" }()
	b := currentBuild()
	if b.Version != "v9.9.9" || b.Commit != commit || b.BuildDate != date {
		t.Errorf("currentBuild() = %+v, want the link-time values", b)
	}
	if s := b.String(); !strings.Contains(s, "heed v9.9.9 (commit 0123456789ab, built 2026-01-02 03:04 UTC") {
		t.Errorf("version line = %q", s)
	}
}

// TestManPages: heed docs man writes one page per command.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runCLI(t, "docs", "man", dir)
	if code != 0 {
		t.Fatalf("docs man: exit %d\n%s%s", code, out, errOut)
	}
	var want []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.Name() != "heed" {
			return
		}
		want = append(want, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	root := newRoot()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	walk(root)
	for _, page := range want {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("no man page %s: %v", page, err)
			continue
		}
		if !bytes.Contains(b, []byte(".TH \"HEED\" \"1\"")) || !bytes.Contains(b, []byte(".SH NAME")) {
			t.Errorf("%s is not a man page:\n%.300s", page, b)
		}
	}
	for _, page := range []string{"heed.1", "heed-run.1", "heed-confirm-answer.1"} {
		if !slices.Contains(want, page) {
			t.Errorf("the command tree has no %s: %v", page, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "heed-run.1")); !bytes.Contains(b, []byte("EXAMPLE")) {
		t.Errorf("heed-run.1 has no examples")
	}
}

// TestEveryCommandHasExamples: every command's help shows examples.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Example == "" {
			t.Errorf("%s has no examples", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                     "0s",
		250 * time.Millisecond:                "250ms",
		7056789 * time.Microsecond:            "7.1s",
		42*time.Second + 400*time.Millisecond: "42s",
		3*time.Minute + 12*time.Second:        "3m12s",
		2*time.Hour + 5*time.Minute + 1*time.Second: "2h05m",
		-1500 * time.Millisecond:                    "-1.5s",
		9960 * time.Millisecond:                     "10s",
		59600 * time.Millisecond:                    "1m00s",
		59*time.Minute + 59600*time.Millisecond:     "1h00m",
		999600 * time.Microsecond:                   "1.0s",
		47 * time.Hour:                              "47h00m",
		7*24*time.Hour - time.Second:                "7d00h",
		50*time.Hour + 31*time.Minute:               "2d03h",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if got := msDuration(7056.789); got != "7.1s" {
		t.Errorf("msDuration(7056.789) = %q", got)
	}
}

// TestTableAlignsColouredCells: colour codes do not count as width.
func TestTableAlignsColouredCells(t *testing.T) {
	var b bytes.Buffer
	pal := palette{on: true}
	tb := newTable(&b)
	tb.row(pal.bold("RUN"), pal.bold("STATUS"), "STEP")
	tb.row("r1", pal.status("completed"), "deploy")
	tb.row("run-two", pal.status("failed"), "→ é")
	tb.Flush()
	strip := regexp.MustCompile("\033\\[[0-9;]*m")
	lines := strings.Split(strip.ReplaceAllString(b.String(), ""), "\n")
	want := []string{
		"RUN      STATUS     STEP",
		"r1       completed  deploy",
		"run-two  failed     → é",
		"",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("table:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(b.String(), "\033[32mcompleted\033[0m") {
		t.Errorf("no colour on a terminal palette: %q", b.String())
	}
}

// TestNoColor: colour only on a terminal, never with NO_COLOR or
// --no-color.
func TestNoColor(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if paletteFor(f, false).on {
		t.Errorf("colour on for a file")
	}
	if p := paletteFor(f, false); p.status("failed") != "failed" {
		t.Errorf("a palette that is off painted %q", p.status("failed"))
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		t.Setenv("NO_COLOR", "")
		t.Setenv("TERM", "xterm")
		if !paletteFor(tty, false).on {
			t.Errorf("colour off on a terminal")
		}
		if paletteFor(tty, true).on {
			t.Errorf("colour on with --no-color")
		}
		t.Setenv("NO_COLOR", "1")
		if paletteFor(tty, false).on {
			t.Errorf("colour on with NO_COLOR=1")
		}
	}
	// The CLI as a child process, its output a pipe: no escape codes.
	out, _, _ := runCLI(t, "--help")
	if strings.Contains(out, "\033[") {
		t.Errorf("escape codes in piped output: %q", out)
	}
}

// TestColourOnTerminal: on a real terminal (a tmux pane) statuses are
// coloured; NO_COLOR and --no-color turn colour off.
func TestColourOnTerminal(t *testing.T) {
	t.Parallel()
	s := newTmux(t)
	url, _ := startHeedCLI(t)
	p := s.newPane(t, "colour")
	show := func(cmdline, marker string) string {
		t.Helper()
		p.typeLine(fmt.Sprintf("clear; %s; echo %s=$?", cmdline, marker))
		p.waitScreen(marker, 20*time.Second, func(sc string) bool { return regexp.MustCompile(marker + `=\d`).MatchString(sc) })
		return s.run(t, "capture-pane", "-p", "-e", "-t", p.name)
	}
	green := regexp.MustCompile("\033\\[(?:[0-9;]*;)?32m\\s*OK")
	if sc := show(fmt.Sprintf("%s --nats-url %s status", heedBin, url), "A"); !green.MatchString(sc) {
		t.Errorf("heed status on a terminal: OK is not green:\n%q", sc)
	}
	for i, cmdline := range []string{
		fmt.Sprintf("NO_COLOR=1 %s --nats-url %s status", heedBin, url),
		fmt.Sprintf("%s --nats-url %s --no-color status", heedBin, url),
	} {
		sc := show(cmdline, fmt.Sprintf("B%d", i))
		if !strings.Contains(sc, "OK") || strings.Contains(sc, "\033[32m") || green.MatchString(sc) {
			t.Errorf("%s: want OK without colour:\n%q", cmdline, sc)
		}
	}
}

// TestExamplesParse: every example in every command's help names a real
// command whose flags and arguments it accepts.
func TestExamplesParse(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range exampleLines(c.Example) {
			args, err := shellWords(line)
			if err != nil {
				t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
				continue
			}
			if len(args) == 0 || args[0] != "heed" {
				continue // another program (man, jq)
			}
			root := newRoot()
			cmd, rest, err := root.Find(args[1:])
			if err != nil {
				t.Errorf("example %q: %v", line, err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("example %q: %s: %v", line, cmd.CommandPath(), err)
				continue
			}
			if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
				t.Errorf("example %q: %s: %v", line, cmd.CommandPath(), err)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
}

// exampleLines joins continued lines (ending in \) and cuts each at a pipe,
// a comment or a second command.
func exampleLines(ex string) []string {
	var out []string
	var cur string
	for _, l := range strings.Split(ex, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasSuffix(l, `\`) {
			cur += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		l = cur + l
		cur = ""
		for _, sep := range []string{" | ", " # ", " && "} {
			if i := strings.Index(l, sep); i >= 0 {
				l = l[:i]
			}
		}
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// shellWords splits a command line as a shell would (quotes, no
// expansion).
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c", quote)
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}
