package main

// heed changes, tested where a person meets it: the review of a change set
// in a real terminal (a tmux pane), against heed up running the example
// groom_task skill, whose task tools are deferred.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestChangesReviewAtTheTerminal(t *testing.T) {
	s := newTmux(t)
	h := startHeedWithTools(t)
	task := fmt.Sprintf("task-tmux-%d", time.Now().UnixNano())
	state := "/tmp/heed-sim-state" // the example tools' state (HEED_SIM_STATE unset)
	if v := os.Getenv("HEED_SIM_STATE"); v != "" {
		state = v
	}
	dir := filepath.Join(state, "tasks", task)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "title"), []byte("login"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, append([]string{"--nats-url", h.url}, args...)...)
		if code != 0 {
			t.Fatalf("heed %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	// The skill runs to its end at once: its changes are queued, not made.
	cli("run", "../../skills/groom_task.yaml", "-i", "task="+task)
	if b, _ := os.ReadFile(filepath.Join(dir, "title")); string(b) != "login" {
		t.Fatalf("a deferred tool ran before review: title %q", b)
	}
	var list struct {
		Sets []struct {
			ID string `json:"id"`
		} `json:"sets"`
	}
	var id string
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if err := json.Unmarshal([]byte(cli("changes", "list", "--json")), &list); err != nil || len(list.Sets) != 1 {
			return fmt.Errorf("sets %+v (%v)", list.Sets, err)
		}
		id = list.Sets[0].ID
		return nil
	})

	p := s.newPane(t, "changes")
	p.typeLine(fmt.Sprintf("'%s' --nats-url %s changes; echo EXIT=$?", heedBin, h.url))
	sc := p.waitScreen("the change set's card", 60*time.Second, func(sc string) bool { return strings.Contains(sc, "1-9,0 item · c confirm") })
	for _, want := range []string{"suggests 7 changes for skill:groom_task", id + " · pending", `▶ 1) Set title to "Fix login bug"`, "2) Set estimate to 120 min",
		"┄┄ Checklist items (5) ┄┄", `7) Add checklist item: "Run smoke tests"`, "title: login → Fix login bug"} {
		if !strings.Contains(sc, want) {
			t.Errorf("the card lacks %q:\n%s", want, sc)
		}
	}
	// c confirms the item under the cursor; the runner applies it.
	p.press("c")
	p.waitScreen("item 1 confirmed and applied", 60*time.Second, func(sc string) bool {
		return strings.Contains(sc, `1) Set title to "Fix login bug"                 ✓ confirmed by user:tmux-tester via terminal · applied`)
	})
	// 7 moves to the last item, r asks a reason.
	p.press("7", "r")
	p.waitScreen("the reason prompt", 60*time.Second, func(sc string) bool { return strings.Contains(sc, "reason (Enter to send, Esc to cancel):") })
	p.typeLine("smoke tests run in CI")
	p.waitScreen("item 7 rejected", 60*time.Second, func(sc string) bool {
		return strings.Contains(sc, `✗ rejected by user:tmux-tester via terminal ("smoke tests run in CI")`)
	})
	// A decision from another channel shows at once.
	cli("changes", "confirm", id, "3", "--as", "user:bob")
	p.waitScreen("bob's decision, made elsewhere", 60*time.Second, func(sc string) bool { return strings.Contains(sc, "✓ confirmed by user:bob via cli") })
	// 2, d defers the estimate; a confirms every item left.
	p.press("2", "d")
	p.waitScreen("item 2 deferred", 60*time.Second, func(sc string) bool { return strings.Contains(sc, "⏸ deferred by user:tmux-tester via terminal") })
	p.press("a")
	// The card is redrawn in place: the last frame is what counts.
	p.waitScreen("the set resolved and every confirmed item applied", 60*time.Second, func(sc string) bool {
		frame := sc[strings.LastIndex(sc, "✨"):]
		return strings.Contains(frame, id+" · resolved") && strings.Count(frame, "· applied") == 5
	})
	p.press("q")
	sc = p.waitScreen("the exit status", 60*time.Second, func(sc string) bool { return exitRE.MatchString(sc) })
	if m := exitRE.FindStringSubmatch(sc); m[1] != "0" {
		t.Errorf("heed changes exited %s:\n%s", m[1], sc)
	}
	checklist, _ := os.ReadFile(filepath.Join(dir, "checklist"))
	title, _ := os.ReadFile(filepath.Join(dir, "title"))
	if string(title) != "Fix login bug" || string(checklist) != "Design mockup\nImplement API\nWrite tests\nDeploy to staging\n" {
		t.Errorf("the task after review: title %q, checklist %q", title, checklist)
	}
	if _, err := os.Stat(filepath.Join(dir, "estimate")); err == nil {
		t.Errorf("the deferred estimate was applied")
	}
}
