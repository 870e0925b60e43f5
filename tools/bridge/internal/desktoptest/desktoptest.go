// Package desktoptest starts a desktop session for tests: a real X
// server (Xvfb), a private session bus and the dunst notification daemon.
package desktoptest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/tools/bridge/desktop"
)

// The desktop tests run a real X server (Xvfb), a private session bus and
// the dunst notification daemon: tools/ci/deps.sh installs them (Debian:
// xvfb dbus-x11 dunst libnotify-bin zenity xdotool imagemagick
// libglib2.0-bin). Screenshots go to $HEED_ARTIFACTS/desktop (default:
// artifacts/desktop at the repository's root, ignored by git).

var desktopTools = []string{"Xvfb", "dbus-daemon", "dunst", "dunstctl", "notify-send", "zenity", "xdotool", "import", "gdbus"}

// Session is a running desktop session.
type Session struct {
	display, bus string
	dir          string
}

// Start starts Xvfb on a free display, a session bus and dunst,
// whose context menu (dmenu) is a script choosing the line with pick.
func Start(t *testing.T, pick string) *Session {
	t.Helper()
	if testing.Short() {
		t.Skip("the desktop session takes seconds; not under -short")
	}
	for _, b := range desktopTools {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s is not installed: run tools/ci/deps.sh (make test does) to install the desktop test's Debian packages", b)
		}
	}
	s := &Session{dir: t.TempDir()}
	// Xvfb picks a free display and says which once it accepts
	// connections (-displayfd): two test packages starting sessions at
	// once (the desktop and chat bridges') cannot pick the same one.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	xvfb := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "1024x768x24", "-nolisten", "tcp")
	xvfb.ExtraFiles = []*os.File{w}
	background(t, xvfb)
	_ = w.Close()
	shown := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		_ = r.Close()
		shown <- strings.TrimSpace(line)
	}()
	select {
	case n := <-shown:
		if n == "" {
			t.Fatal("Xvfb did not start (no display number on -displayfd)")
		}
		s.display = ":" + n
	case <-time.After(20 * time.Second):
		t.Fatal("Xvfb did not say its display within 20 s")
	}
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
	eventstest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error { // slow on a loaded machine
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

// Artifacts is where screenshots go: $HEED_ARTIFACTS/desktop, default
// artifacts/desktop at the repository root.
func Artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("HEED_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(repoRoot(), "artifacts")
	}
	dir = filepath.Join(dir, "desktop")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Screenshot saves the screen as name under Artifacts.
func Screenshot(t *testing.T, name string) {
	t.Helper()
	p := filepath.Join(Artifacts(t), name)
	if out, err := exec.Command("import", "-window", "root", p).CombinedOutput(); err != nil {
		t.Fatalf("screenshot: %v: %s", err, out)
	}
	// An artifact for people to look at, not an assertion: a screen with
	// nothing left on it (the notification closed by the answer) is a
	// small image, and still a screenshot.
	fi, err := os.Stat(p)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("screenshot %s: nothing written (%v)", p, err)
	}
	t.Logf("screenshot: %s (%d bytes)", p, fi.Size())
}

// repoRoot is the directory holding go.work, from the test's directory up.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d
		}
	}
	return dir
}

// Displayed is how many notifications dunst shows.
func Displayed() (string, error) {
	out, err := exec.Command("dunstctl", "count", "displayed").Output()
	return strings.TrimSpace(string(out)), err
}

// RunBridge runs the desktop bridge with cfg on c until the test's
// cleanup (or the returned stop).
func RunBridge(t *testing.T, c *heedclient.Client, cfg desktop.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := desktop.Detect(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- desktop.Run(ctx, c, cfg, b) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// WaitDisplayed waits until dunst shows a notification.
func WaitDisplayed(t *testing.T) {
	t.Helper()
	eventstest.CheckFor(t, 60*time.Second, 100*time.Millisecond, func() error {
		n, err := Displayed()
		if err != nil || n == "0" {
			return fmt.Errorf("no notification displayed yet (%s, %v)", n, err)
		}
		return nil
	})
}
