package chat_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/tools/bridge/desktop"
	"github.com/heedhq/heed/tools/bridge/internal/desktoptest"
	"github.com/slack-go/slack/slacktest"
)

// TestDesktopAndSlackAnswerAtOnce: alice approves on her desktop while
// carol rejects on Slack, at the same moment. Exactly one answer takes
// effect; the channel that lost shows who answered (the Slack message is
// updated with the winner, the desktop notification is replaced by it).
func TestDesktopAndSlackAnswerAtOnce(t *testing.T) {
	desktoptest.Start(t, "Approve")
	c := startHeed(t)
	ch := &channel{}
	srv := slacktest.NewTestServer(ch.bind)
	srv.Start()
	defer srv.Stop()
	r := startBridge(t, c, ch, srv)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer desktoptest.RunBridge(t, c, desktop.Config{Identity: "alice"})()

	id := ask(t, c, events.ConfirmRequestedData{Title: "Drop the staging database?", Message: "both may answer", TimeoutS: 600})
	eventstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if m, _ := ch.find(id); m == nil {
			return fmt.Errorf("not posted to Slack yet")
		}
		if n, err := desktoptest.Displayed(); err != nil || n == "0" {
			return fmt.Errorf("no notification yet")
		}
		return nil
	})
	var wg sync.WaitGroup
	var slackCode int
	wg.Add(2)
	go func() {
		defer wg.Done()
		slackCode, _ = r.click(t, "U0CAROL", id, "cancel", secret, time.Now())
	}()
	go func() {
		defer wg.Done()
		_ = exec.Command("dunstctl", "context").Run()
	}()
	wg.Wait()

	var want string
	eventstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		st, err := c.Confirmation(ctx, id)
		if err != nil || st.Answer == nil {
			return fmt.Errorf("no answer yet")
		}
		took := 0
		for _, a := range st.Answers {
			if a.Refusal == nil {
				took++
			}
		}
		if took != 1 {
			return fmt.Errorf("%d answers took effect, want exactly 1", took)
		}
		switch {
		case st.Answer.By == "alice" && st.Answer.Channel == desktop.Channel:
			want = "Approve by alice via desktop"
			if slackCode != http.StatusConflict {
				return fmt.Errorf("carol's click lost but got %d, want 409 (already answered)", slackCode)
			}
		case st.Answer.By == "carol" && st.Answer.Channel == "slack":
			want = "Reject by carol via slack"
		default:
			return fmt.Errorf("answer %+v from neither race", st.Answer)
		}
		return nil
	})
	t.Logf("won: %s", want)
	// Both channels now show the winner.
	eventstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		m, _ := ch.find(id)
		if m == nil || !strings.Contains(string(m.Blocks), want) {
			return fmt.Errorf("Slack message does not say %q", want)
		}
		return nil
	})
	desktoptest.Screenshot(t, "race.png")
	eventstest.CheckFor(t, 20*time.Second, 200*time.Millisecond, func() error {
		_ = exec.Command("dunstctl", "close-all").Run()
		out, err := exec.Command("dunstctl", "history").Output()
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), want) && !strings.Contains(string(out), "already answered") {
			return fmt.Errorf("the desktop does not say who answered: %.300s", out)
		}
		return nil
	})
}
