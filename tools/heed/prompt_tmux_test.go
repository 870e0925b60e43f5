package main

// The terminal prompt, tested where a person meets it: heed runs in a real
// terminal (a tmux pane on a private tmux server) against `heed up`, and
// the test reads the screen and presses keys.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/services/runner"
)

const testSHA = "89abcdef0123456789abcdef0123456789abcdef"

// startHeedWithTools runs `heed up` with the example skills' tools.
func startHeedWithTools(t *testing.T) *heed {
	t.Helper()
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	p := startProc(t, "heed up", "up", "--data", t.TempDir(), "--nats-listen", listen, "--tools", "../../skills/tools.yaml")
	p.waitOutput("ready", 30*time.Second)
	return &heed{proc: p, url: "nats://" + listen}
}

// tmuxServer is a tmux server on a private socket, so that the test never
// touches a user's tmux.
type tmuxServer struct {
	bin    string
	socket string
	env    []string
}

func newTmux(t *testing.T) *tmuxServer {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed: the terminal prompt test needs a real terminal (tools/ci/deps.sh installs tmux; `make test` runs it)")
	}
	env := append(childEnv(), "HEED_USER=tmux-tester")
	if os.Getenv("TERM") == "" {
		env = append(env, "TERM=xterm-256color")
	}
	s := &tmuxServer{bin: bin, socket: fmt.Sprintf("heed-test-%d-%d", os.Getpid(), time.Now().UnixNano()), env: env}
	t.Cleanup(func() {
		tmux := func(args ...string) string {
			cmd := exec.Command(s.bin, append([]string{"-L", s.socket}, args...)...)
			cmd.Env = s.env
			out, _ := cmd.Output()
			return strings.TrimSpace(string(out))
		}
		path := tmux("display-message", "-p", "#{socket_path}")
		tmux("kill-server")
		if strings.HasSuffix(path, s.socket) {
			_ = os.Remove(path)
		}
	})
	return s
}

func (s *tmuxServer) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.bin, append([]string{"-L", s.socket, "-f", "/dev/null"}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// pane is a shell in a tmux session, 160 columns wide, used by one test.
type pane struct {
	t    *testing.T
	s    *tmuxServer
	name string
}

func (s *tmuxServer) newPane(t *testing.T, name string) *pane {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	s.run(t, "new-session", "-d", "-s", name, "-x", "160", "-y", "50", "-c", dir,
		"-e", "HEED_USER=tmux-tester", "-e", "PS1=$ ", "bash --norc --noprofile")
	return &pane{t: t, s: s, name: name}
}

// typeLine types a command line and presses Enter.
func (p *pane) typeLine(line string) {
	p.t.Helper()
	p.s.run(p.t, "send-keys", "-t", p.name, "-l", line)
	p.s.run(p.t, "send-keys", "-t", p.name, "Enter")
}

// press sends keys (tmux key names, e.g. Enter, or "1").
func (p *pane) press(keys ...string) {
	p.t.Helper()
	p.s.run(p.t, append([]string{"send-keys", "-t", p.name}, keys...)...)
}

// screen is what the pane shows now, with its scrollback.
func (p *pane) screen() string {
	p.t.Helper()
	return p.s.run(p.t, "capture-pane", "-p", "-J", "-t", p.name, "-S", "-500")
}

// waitScreen polls the pane until ok accepts it.
func (p *pane) waitScreen(what string, timeout time.Duration, ok func(string) bool) string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sc := p.screen()
		if ok(sc) {
			return sc
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the terminal does not show %s after %s; it shows:\n%s\n(end of the screen: it does not show %s)", what, timeout, strings.TrimRight(sc, " \n"), what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var (
	countdownRE = regexp.MustCompile(`waiting for your answer — (?:(\d+)m )?(\d+)s left`)
	exitRE      = regexp.MustCompile(`EXIT=(\d+)`)
	runIDRE     = regexp.MustCompile(`run (\S+) started`)
)

// secondsLeft reads the countdown from the screen.
func secondsLeft(sc string) (int, bool) {
	m := countdownRE.FindAllStringSubmatch(sc, -1)
	if len(m) == 0 {
		return 0, false
	}
	last := m[len(m)-1]
	mins, _ := strconv.Atoi(last[1])
	secs, _ := strconv.Atoi(last[2])
	return mins*60 + secs, true
}

// runAtPrompt runs the release skill in a fresh pane, waits for the
// prompt, checks it, presses keys and returns the screen and exit status.
func runAtPrompt(t *testing.T, s *tmuxServer, h *heed, session string, keys ...string) (string, int, string) {
	t.Helper()
	p := s.newPane(t, session)
	p.typeLine(fmt.Sprintf("'%s' --nats-url %s run ../../skills/release_prod.yaml -i commit_sha=%s; echo EXIT=$?", heedBin, h.url, testSHA))

	sc := p.waitScreen("the prompt with its countdown", 30*time.Second, func(sc string) bool {
		_, ok := secondsLeft(sc)
		return ok && strings.Contains(sc, "2) Cancel (default)")
	})
	for _, want := range []string{"Release to production", "Ready to release 89abcdef (quay.io/app-sre/backend:" + testSHA + ") to production.",
		"1) Proceed — open the merge request", "2) Cancel (default) — stop here; nothing changes", "Enter = default · 1-9 = choose"} {
		if !strings.Contains(sc, want) {
			t.Errorf("the prompt lacks %q:\n%s", want, sc)
		}
	}
	first, _ := secondsLeft(sc)
	if first > 300 || first < 280 {
		t.Errorf("the countdown shows %ds left of a 300 s timeout:\n%s", first, sc)
	}
	// The countdown goes down: it redraws every 100 ms, so within a few
	// seconds it shows less than it first did.
	sc = p.waitScreen(fmt.Sprintf("the countdown below %ds", first), 5*time.Second, func(sc string) bool {
		second, ok := secondsLeft(sc)
		return ok && second < first
	})
	if n := strings.Count(sc, "waiting for your answer"); n != 1 {
		t.Errorf("the countdown is drawn on %d lines, want 1 (redrawn in place):\n%s", n, sc)
	}

	p.press(keys...)
	sc = p.waitScreen("the exit status", 30*time.Second, func(sc string) bool { return exitRE.MatchString(sc) })
	code, _ := strconv.Atoi(exitRE.FindStringSubmatch(sc)[1])
	m := runIDRE.FindStringSubmatch(sc)
	if m == nil {
		t.Fatalf("heed run did not print its run id:\n%s", sc)
	}
	return sc, code, m[1]
}

// answerOf reads the stored answer of the run's confirm step.
func answerOf(t *testing.T, url, runID string) events.ConfirmAnsweredData {
	t.Helper()
	_, js := connect(t, url)
	ctx := ctxFor(t, 10*time.Second)
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.ConfirmAnswered.Subject(runner.ConfirmID(runID, 2, 1)))
	if err != nil {
		t.Fatalf("answer of run %s: %v", runID, err)
	}
	var a events.ConfirmAnsweredData
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestTerminalPrompt(t *testing.T) {
	s := newTmux(t)
	t.Parallel()
	h := startHeedWithTools(t)

	t.Run("Enter takes the default", func(t *testing.T) {
		sc, code, runID := runAtPrompt(t, s, h, "enter", "Enter")
		for _, want := range []string{"→ cancel (user by user:tmux-tester", "run cancelled by user:tmux-tester"} {
			if !strings.Contains(sc, want) {
				t.Errorf("the terminal lacks %q:\n%s", want, sc)
			}
		}
		if code != exitNotCompleted {
			t.Errorf("heed run exited %d, want %d (cancelled):\n%s", code, exitNotCompleted, sc)
		}
		if a := answerOf(t, h.url, runID); a.Choice != "cancel" || a.Method != events.MethodUser || a.Channel != "terminal" || a.By != "user:tmux-tester" {
			t.Errorf("stored answer = %+v; want cancel by user:tmux-tester at the terminal", a)
		}
	})

	t.Run("a digit picks that option", func(t *testing.T) {
		sc, code, runID := runAtPrompt(t, s, h, "digit", "1")
		for _, want := range []string{"→ proceed (user by user:tmux-tester", "✓ open_mr", "run completed", "Released 89abcdef to production: https://gitlab.example.com/"} {
			if !strings.Contains(sc, want) {
				t.Errorf("the terminal lacks %q:\n%s", want, sc)
			}
		}
		if code != exitOK {
			t.Errorf("heed run exited %d, want 0:\n%s", code, sc)
		}
		if a := answerOf(t, h.url, runID); a.Choice != "proceed" || a.Method != events.MethodUser || a.Remember != "" {
			t.Errorf("stored answer = %+v; want proceed by the user, not remembered", a)
		}
	})

	// A run that asks twice: each prompt takes exactly one key press (the
	// first prompt must not leave a reader behind that eats the next key).
	t.Run("two prompts in one run", func(t *testing.T) {
		skillFile := filepath.Join(t.TempDir(), "two_questions.yaml")
		if err := os.WriteFile(skillFile, []byte(twoQuestions), 0o644); err != nil {
			t.Fatal(err)
		}
		p := s.newPane(t, "twice")
		p.typeLine(fmt.Sprintf("'%s' --nats-url %s run '%s'; echo EXIT=$?", heedBin, h.url, skillFile))
		promptFor := func(question string) func(string) bool {
			return func(sc string) bool {
				i := strings.LastIndex(sc, question)
				return i >= 0 && countdownRE.MatchString(sc[i:])
			}
		}
		p.waitScreen("the first prompt", 30*time.Second, promptFor("First question?"))
		p.press("1")
		// At once: the countdown is drawn after the prompt has taken the
		// terminal and started its key reader, and a reader left behind by
		// the first prompt would take this key.
		p.waitScreen("the second prompt", 30*time.Second, promptFor("Second question?"))
		p.press("1")
		sc := p.waitScreen("the exit status after one key press at the second prompt", 10*time.Second, func(sc string) bool { return exitRE.MatchString(sc) })
		if code := exitRE.FindStringSubmatch(sc)[1]; code != "0" || strings.Count(sc, "→ proceed (user by user:tmux-tester") != 2 {
			t.Errorf("want both questions answered proceed and exit 0; the terminal shows:\n%s", sc)
		}
	})

	// An answer given elsewhere while the prompt waits ends the prompt at
	// once: it is the last event of the confirmation, so a prompt that read
	// the confirmation on hearing it published (before the store) would
	// wait until the deadline.
	t.Run("an answer from elsewhere ends the prompt", func(t *testing.T) {
		p := s.newPane(t, "elsewhere")
		p.typeLine(fmt.Sprintf("'%s' --nats-url %s run ../../skills/release_prod.yaml -i commit_sha=%s; echo EXIT=$?", heedBin, h.url, testSHA))
		sc := p.waitScreen("the prompt", 30*time.Second, func(sc string) bool { return countdownRE.MatchString(sc) && runIDRE.MatchString(sc) })
		id := runner.ConfirmID(runIDRE.FindStringSubmatch(sc)[1], 2, 1)
		if out, errOut, code := runCLI(t, "--nats-url", h.url, "confirm", "answer", id, "proceed", "--by", "user:bob"); code != 0 {
			t.Fatalf("heed confirm answer: exit %d\n%s\n%s", code, out, errOut)
		}
		sc = p.waitScreen("the exit status", 10*time.Second, func(sc string) bool { return exitRE.MatchString(sc) })
		if code := exitRE.FindStringSubmatch(sc)[1]; code != "0" || !strings.Contains(sc, "→ proceed (user by user:bob") {
			t.Errorf("want the prompt to end with bob's answer and the run to complete; the terminal shows:\n%s", sc)
		}
	})

	// Ctrl-C where there is no cancel option leaves the question open: heed
	// run says how to answer it elsewhere, and follows the answer from there.
	t.Run("Ctrl-C without a cancel option", func(t *testing.T) {
		skillFile := filepath.Join(t.TempDir(), "no_cancel.yaml")
		if err := os.WriteFile(skillFile, []byte(noCancel), 0o644); err != nil {
			t.Fatal(err)
		}
		p := s.newPane(t, "ctrlc")
		p.typeLine(fmt.Sprintf("'%s' --nats-url %s run '%s'; echo EXIT=$?", heedBin, h.url, skillFile))
		p.waitScreen("the prompt", 30*time.Second, func(sc string) bool { return countdownRE.MatchString(sc) && strings.Contains(sc, "2) Skip (default)") })
		p.press("C-c")
		sc := p.waitScreen("how to answer elsewhere", 10*time.Second, func(sc string) bool {
			return strings.Contains(sc, "answer from another terminal: heed confirm answer")
		})
		m := regexp.MustCompile(`answer from another terminal: heed confirm answer (\S+) go   \(or: heed confirm (\S+), to be asked\)`).FindStringSubmatch(sc)
		if m != nil && m[1] != m[2] {
			m = nil
		}
		if m == nil {
			t.Fatalf("no confirmation id in:\n%s", sc)
		}
		if out, errOut, code := runCLI(t, "--nats-url", h.url, "confirm", "answer", m[1], "go"); code != 0 {
			t.Fatalf("heed confirm answer: exit %d\n%s\n%s", code, out, errOut)
		}
		sc = p.waitScreen("the exit status", 30*time.Second, func(sc string) bool { return exitRE.MatchString(sc) })
		if code := exitRE.FindStringSubmatch(sc)[1]; code != "0" || !strings.Contains(sc, "→ resumed at ask: go (user by ") || strings.Contains(sc, "not recorded") {
			t.Errorf("want the run to resume with the answer given elsewhere and exit 0; the terminal shows:\n%s", sc)
		}
	})
}

const noCancel = `name: no_cancel
description: Asks without a cancel option.
steps:
  - name: ask
    confirm:
      message: Go or skip?
      options:
        - label: Go
          value: go
        - label: Skip
          value: skip
      default: skip
`

const twoQuestions = `name: two_questions
description: Asks twice.
steps:
  - name: first
    confirm:
      message: First question?
      options:
        - label: "Yes"
          value: proceed
        - label: "No"
          value: cancel
      default: cancel
  - name: second
    confirm:
      message: Second question?
      options:
        - label: "Yes"
          value: proceed
        - label: "No"
          value: cancel
      default: cancel
`

// Without a terminal nobody can be asked: heed confirm says so at once
// (exit 2); with --yes it answers with the proceed option as an override.
func TestConfirmWithoutTerminal(t *testing.T) {
	t.Parallel()
	h := startHeedWithTools(t)
	_, js := connect(t, h.url)
	const id = "c-noterm"
	req := events.ConfirmRequestedData{Message: "Scale prod-db down?", Requester: "test-agent", Default: "cancel", TimeoutS: 600,
		Options: []events.Option{{Label: "Cancel", Value: "cancel"}, {Label: "Proceed", Value: "proceed"}}}
	ev, err := events.NewEvent(events.ConfirmRequested, id, id+"/requested", "test-agent", req)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := events.EncodeUnchecked(&ev)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, js, msg)

	cli := func(args ...string) (string, string, int) {
		return runCLI(t, append([]string{"--nats-url", h.url}, args...)...)
	}
	out, errOut, code := cli("confirm", id) // stdin is /dev/null
	if code != 2 || !strings.Contains(errOut, "not a terminal") || !strings.Contains(errOut, "heed confirm answer "+id) {
		t.Fatalf("heed confirm without a terminal: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 2 and a message saying stdin is not a terminal", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.GetLastMsgForSubject(ctx, events.ConfirmAnswered.Subject(id)); err == nil {
		t.Fatalf("heed confirm without a terminal answered: %s", m.Data)
	}

	out, errOut, code = cli("confirm", id, "--yes")
	if code != 0 || !strings.Contains(out, "→ proceed (user by ") {
		t.Fatalf("heed confirm --yes: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	m, err := s.GetLastMsgForSubject(ctx, events.ConfirmAnswered.Subject(id))
	if err != nil {
		t.Fatalf("no answer stored after heed confirm --yes: %v", err)
	}
	var a events.ConfirmAnsweredData
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatal(err)
	}
	if a.Choice != "proceed" || a.Method != events.MethodUser || a.Channel != "cli" || a.Reason != "--yes" {
		t.Errorf("stored answer = %+v; want proceed, method user (a person answered, with --yes), channel cli", a)
	}

	// The first answer won: a second is refused, naming it.
	out, errOut, code = cli("confirm", id, "--yes")
	if code == 0 || !strings.Contains(errOut, "already answered by") || !strings.Contains(errOut, `"proceed" (method user)`) {
		t.Errorf("second heed confirm --yes: exit %d\nstdout:\n%s\nstderr:\n%s\nwant a refusal naming the first answer", code, out, errOut)
	}
}
