package desktop_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/service/servicetest"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/runner"
	"github.com/heedhq/heed/tools/bridge/desktop"
)

// The desktop tests run a real X server (Xvfb), a private session bus and
// the dunst notification daemon: tools/ci/deps.sh installs them (Debian:
// xvfb dbus-x11 dunst libnotify-bin zenity xdotool imagemagick
// libglib2.0-bin). Screenshots go to $HEED_ARTIFACTS/desktop (default:
// artifacts/desktop at the repository's root, ignored by git).

var desktopTools = []string{"Xvfb", "dbus-daemon", "dunst", "dunstctl", "notify-send", "zenity", "xdotool", "import", "gdbus"}

type session struct {
	display, bus string
	dir          string
}

// startSession starts Xvfb on a free display, a session bus and dunst,
// whose context menu (dmenu) is a script choosing the line with pick.
func startSession(t *testing.T, pick string) *session {
	t.Helper()
	if testing.Short() {
		t.Skip("the desktop session takes seconds; not under -short")
	}
	for _, b := range desktopTools {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s is not installed: run tools/ci/deps.sh (make test does) to install the desktop test's Debian packages", b)
		}
	}
	s := &session{dir: t.TempDir()}
	n := 0
	for n = 91; n < 140; n++ {
		if _, err := os.Stat(fmt.Sprintf("/tmp/.X11-unix/X%d", n)); os.IsNotExist(err) {
			if _, err := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n)); os.IsNotExist(err) {
				break
			}
		}
	}
	s.display = fmt.Sprintf(":%d", n)
	background(t, exec.Command("Xvfb", s.display, "-screen", "0", "1024x768x24", "-nolisten", "tcp"))
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		_, err := os.Stat(fmt.Sprintf("/tmp/.X11-unix/X%d", n))
		return err
	})
	bus := exec.Command("dbus-daemon", "--session", "--nofork", "--print-address=1")
	out, err := bus.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	background(t, bus)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("session bus address: %v", err)
	}
	s.bus = strings.TrimSpace(line)
	t.Setenv("DISPLAY", s.display)
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", s.bus)
	t.Setenv("WAYLAND_DISPLAY", "")
	menu := filepath.Join(s.dir, "menu.sh")
	script := "#!/bin/sh\n# dunst's context menu: choose the action whose line names " + pick + "\ntee " + filepath.Join(s.dir, "menu.txt") + " | grep -m1 '" + pick + "'\n"
	if err := os.WriteFile(menu, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(s.dir, "dunstrc")
	conf := "[global]\n    dmenu = " + menu + "\n    font = Monospace 10\n    width = 500\n    origin = top-right\n    offset = 10x10\n"
	if err := os.WriteFile(rc, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	background(t, exec.Command("dunst", "-config", rc))
	eventstest.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		return exec.Command("dunstctl", "is-paused").Run()
	})
	return s
}

// background starts cmd and kills it when the test ends.
func background(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("HEED_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "artifacts")
	}
	dir = filepath.Join(dir, "desktop")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func screenshot(t *testing.T, name string) {
	t.Helper()
	p := filepath.Join(artifacts(t), name)
	if out, err := exec.Command("import", "-window", "root", p).CombinedOutput(); err != nil {
		t.Fatalf("screenshot: %v: %s", err, out)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() < 1000 {
		t.Fatalf("screenshot %s: %v", p, err)
	}
	t.Logf("screenshot: %s", p)
}

// startHeed runs the runner, the confirm router and the indexer on a real
// server and returns a client.
func startHeed(t *testing.T) *heedclient.Client {
	t.Helper()
	env := eventstest.Start(t)
	servicetest.Start(t, env, "runner", func(ctx context.Context, rt *service.Runtime) error { return runner.Run(ctx, rt, runner.Config{}) })
	servicetest.Start(t, env, "confirm", func(ctx context.Context, rt *service.Runtime) error {
		return confirm.Run(ctx, rt, confirm.Config{})
	})
	servicetest.Start(t, env, "indexer", indexer.Run)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := heedclient.Connect(ctx, env.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

const skill = `name: release
steps:
  - name: approve
    confirm:
      title: "Release web 2.4 to production?"
      message: "The release notes were reviewed."
      options:
        - {label: Approve, value: proceed}
        - {label: Reject, value: cancel}
      default: cancel
      timeout: 300
  - name: done
    compute: "1 + 1"
`

// runAndAnswer starts a run, lets the desktop bridge ask alice, has
// answer() act on the desktop, and checks the run resumed on alice's
// answer from the desktop.
func runAndAnswer(t *testing.T, c *heedclient.Client, cfg desktop.Config, answer func(ctx context.Context)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := desktop.Detect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- desktop.Run(bctx, c, cfg, b) }()
	defer func() { stop(); <-done }()
	rep, err := c.StartRun(ctx, command.StartRun{Skill: command.SkillSource{Source: skill}, RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	answer(ctx)
	out, err := c.WaitRun(ctx, rep.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != "completed" {
		t.Fatalf("run %s: %s, want completed (approved from the desktop)", rep.RunID, out.Status)
	}
	hist, err := c.History(ctx, "heed.confirm.>")
	if err != nil {
		t.Fatal(err)
	}
	var got *events.ConfirmAnsweredData
	for _, h := range hist {
		if h.Event != nil && events.Type(h.Event.Type()) == events.ConfirmAnswered {
			var a events.ConfirmAnsweredData
			if h.Event != nil && json.Unmarshal(h.Event.Data(), &a) == nil && a.RunID == rep.RunID {
				got = &a
			}
		}
	}
	if got == nil || got.Method != events.MethodUser || got.Channel != desktop.Channel || got.By != cfg.Identity || got.Choice != "proceed" {
		t.Fatalf("answer %+v, want proceed by %s, method user, channel desktop", got, cfg.Identity)
	}
}

// TestDesktopNotificationAnswersTheRun: a run pauses, dunst shows the
// notification with its buttons, the person picks Approve from dunst's
// context menu (dunstctl context), the run resumes with alice's answer
// from the desktop.
func TestDesktopNotificationAnswersTheRun(t *testing.T) {
	startSession(t, "Approve")
	c := startHeed(t)
	runAndAnswer(t, c, desktop.Config{Identity: "alice"}, func(ctx context.Context) {
		eventstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
			out, err := exec.Command("dunstctl", "count", "displayed").Output()
			if err != nil || strings.TrimSpace(string(out)) == "0" {
				return fmt.Errorf("no notification displayed yet (%s, %v)", out, err)
			}
			return nil
		})
		screenshot(t, "notification.png")
		if out, err := exec.Command("dunstctl", "context").CombinedOutput(); err != nil {
			t.Fatalf("dunstctl context: %v: %s", err, out)
		}
	})
}

// TestDesktopDialogAnswersTheRun: with --dialog the request is a Zenity
// list; the person selects Approve with the keyboard (xdotool) and the run
// resumes.
func TestDesktopDialogAnswersTheRun(t *testing.T) {
	startSession(t, "Approve")
	c := startHeed(t)
	runAndAnswer(t, c, desktop.Config{Identity: "alice", Dialog: true}, func(ctx context.Context) {
		var win string
		eventstest.CheckFor(t, 20*time.Second, 200*time.Millisecond, func() error {
			out, err := exec.Command("xdotool", "search", "--name", "Release web").Output()
			if err != nil || strings.TrimSpace(string(out)) == "" {
				return fmt.Errorf("no dialog yet")
			}
			win = strings.Fields(string(out))[0]
			return nil
		})
		time.Sleep(500 * time.Millisecond) // let it draw before the screenshot
		screenshot(t, "dialog.png")
		// Keyboard focus on the dialog (no window manager here to give
		// it); the list has the focus: its first row (Approve), Enter.
		if out, err := exec.Command("xdotool", "windowfocus", "--sync", win).CombinedOutput(); err != nil {
			t.Fatalf("xdotool windowfocus: %v: %s", err, out)
		}
		for _, key := range []string{"Home", "Return"} {
			if out, err := exec.Command("xdotool", "key", key).CombinedOutput(); err != nil {
				t.Fatalf("xdotool key %s: %v: %s", key, err, out)
			}
			time.Sleep(150 * time.Millisecond)
		}
	})
}

// TestDesktopWithoutDisplay: no display is a clear error at start.
func TestDesktopWithoutDisplay(t *testing.T) {
	_, err := desktop.Detect(context.Background(), desktop.Config{Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "DISPLAY") {
		t.Fatalf("Detect without a display: %v", err)
	}
}

// TestDesktopNotificationClosedByAnAnswerElsewhere: carol answers on
// Slack while alice's notification is up: the notification is replaced by
// who answered (its buttons gone), and the run goes on carol's answer.
func TestDesktopNotificationClosedByAnAnswerElsewhere(t *testing.T) {
	startSession(t, "Approve")
	c := startHeed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := desktop.Config{Identity: "alice"}
	b, err := desktop.Detect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- desktop.Run(bctx, c, cfg, b) }()
	defer func() { stop(); <-done }()
	rep, err := c.StartRun(ctx, command.StartRun{Skill: command.SkillSource{Source: skill}, RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		out, err := exec.Command("dunstctl", "count", "displayed").Output()
		if err != nil || strings.TrimSpace(string(out)) == "0" {
			return fmt.Errorf("no notification displayed yet")
		}
		return nil
	})
	if _, err := c.Answer(ctx, command.AnswerConfirmation{ID: runner.ConfirmID(rep.RunID, 0, 1), Choice: "cancel", By: "carol", Channel: "slack"}); err != nil {
		t.Fatalf("carol's answer : %v", err)
	}
	eventstest.CheckFor(t, 20*time.Second, 200*time.Millisecond, func() error {
		if err := exec.Command("dunstctl", "close-all").Run(); err != nil {
			return err
		}
		out, err := exec.Command("dunstctl", "history").Output()
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), "Reject by carol via slack") {
			return fmt.Errorf("the notification does not say who answered yet: %.300s", out)
		}
		return nil
	})
	out, err := c.WaitRun(ctx, rep.RunID)
	if err != nil || out.Status != "cancelled" {
		t.Fatalf("run %s: %s (%v), want cancelled on carol's answer", rep.RunID, out.Status, err)
	}
}
