package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Without a terminal, heed run at a confirm step does not sit silent: it
// prints the question, the choices, the deadline and the exact command
// that answers it; an answer from another process lets the run complete.
func TestRunWithoutTerminalSaysHowToAnswer(t *testing.T) {
	t.Parallel()
	h := startHeedWithTools(t)
	run := startProc(t, "heed run", "--nats-url", h.url, "run", "../../skills/release_prod.yaml", "-i", "commit_sha="+testSHA) // stdin is /dev/null
	run.waitOutput("or start the run with --yes", 30*time.Second)
	out := run.stdout.String()
	for _, want := range []string{
		"? confirm_release: Ready to release 89abcdef",
		"  choices: proceed, cancel (default)\n",
		"  waiting for an answer until ",
		"then the default, cancel, applies\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("heed run without a terminal lacks %q:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`\((4m 5\d|5m 00)s left\)`).FindString(out)
	if m == "" {
		t.Errorf("heed run does not say how long is left of the 300 s deadline:\n%s", out)
	}
	cmdRE := regexp.MustCompile(`answer from another terminal: heed confirm answer (\S+) proceed   \(or: heed confirm (\S+), to be asked\)`)
	sub := cmdRE.FindStringSubmatch(out)
	if sub == nil || sub[1] != sub[2] {
		t.Fatalf("heed run does not print the command that answers:\n%s", out)
	}
	o, e, code := runCLI(t, "--nats-url", h.url, "confirm", "answer", sub[1], "proceed")
	if code != 0 {
		t.Fatalf("heed confirm answer: exit %d\n%s\n%s", code, o, e)
	}
	select {
	case <-run.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("heed run did not end after the answer:\n%s", run.stdout.String())
	}
	if code := run.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(run.stdout.String(), "run completed") {
		t.Errorf("heed run: exit %d, want 0 and completed:\n%s\n%s", code, run.stdout.String(), run.stderr.String())
	}

	// With --yes the confirm router answers at once: heed run does not tell
	// anyone to answer what is answered (the pause and the override answer
	// race; ten runs to catch it).
	for i := 0; i < 10; i++ {
		out, errOut, code := runCLI(t, "--nats-url", h.url, "run", "--yes", "../../skills/release_prod.yaml", "-i", "commit_sha="+testSHA)
		if code != 0 || !strings.Contains(out, "→ resumed at confirm_release: proceed (override by ") || strings.Contains(out, "waiting for an answer") {
			t.Fatalf("heed run --yes: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0, the override and no line asking for an answer", code, out, errOut)
		}
	}
}

// heed confirm without a terminal fails at once, even with no id (it does
// not wait for a request it could not ask anyway) and with no heed to reach.
func TestConfirmWithoutTerminalFailsAtOnce(t *testing.T) {
	t.Parallel()
	dead := "nats://127.0.0.1:1" // nothing listens: heed confirm must not even try
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"confirm"}, "heed: invalid_request: stdin is not a terminal, so nobody can be asked here: answer with `heed confirm answer CONFIRM-ID CHOICE` (heed confirm list shows what waits), or pass --yes to proceed\n"},
		{[]string{"confirm", "c-1"}, "heed: invalid_request: stdin is not a terminal, so nobody can be asked here: answer with `heed confirm answer c-1 CHOICE` (heed confirm show c-1 lists the choices), or pass --yes to proceed\n"},
	} {
		start := time.Now()
		out, errOut, code := runCLI(t, append([]string{"--nats-url", dead}, c.args...)...)
		if code != 2 || errOut != c.want || out != "" {
			t.Errorf("heed %s without a terminal: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 2 and %q", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
		if d := time.Since(start); d > 5*time.Second { // at once: it never waits for NATS (5 s: a race-built CLI on a loaded machine)
			t.Errorf("heed %s without a terminal took %s to fail", strings.Join(c.args, " "), d)
		}
	}
}
