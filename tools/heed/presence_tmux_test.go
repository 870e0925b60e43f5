package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
)

// TestConfirmIsReachable: heed confirm at a terminal makes its identity
// (--as) reachable while it waits, so the escalator offers a tier naming
// that person instead of passing it as unreachable; the person answers
// the offer at the prompt, and once heed confirm is gone nobody answers
// for them.
func TestConfirmIsReachable(t *testing.T) {
	s := newTmux(t)
	t.Parallel()
	h := startHeedWithTools(t)
	nc, _ := connect(t, h.url)
	presence := func() ([]string, error) {
		m, err := nc.Request(events.PresenceSubject("user:tmux-alice"), nil, 2*time.Second)
		if err != nil {
			return nil, err
		}
		var p events.PresenceReply
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return nil, err
		}
		return p.Channels, nil
	}
	if _, err := presence(); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("before heed confirm: %v, want no responders", err)
	}
	p := s.newPane(t, "reach")
	p.typeLine(fmt.Sprintf("%s --nats-url %s confirm --as user:tmux-alice; echo EXIT=$?", cliBin(t), h.url))
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		ch, err := presence()
		if err != nil {
			return err
		}
		if !slices.Equal(ch, []string{"terminal"}) {
			return fmt.Errorf("channels %v, want [terminal]", ch)
		}
		return nil
	})

	// Only tmux-alice may approve: the tier narrowed to her is reachable,
	// so it is offered and her prompt shows it.
	out, errOut, code := runCLI(t, "--nats-url", h.url, "escalate", "deploy", "--session", "agent/tmux", "--env", "stage", "--risk", "0.5", "--approver", "user:tmux-alice", "--id", "tmux-esc-1")
	if code != 0 || !strings.Contains(out, "offered to tier1") {
		t.Fatalf("escalate: exit %d, want held and offered to tier1\n%s%s", code, out, errOut)
	}
	p.waitScreen("the offer's prompt", 20*time.Second, func(sc string) bool { return strings.Contains(sc, "waiting for your answer") })
	p.press("1")
	sc := p.waitScreen("heed confirm's exit", 20*time.Second, func(sc string) bool { return strings.Contains(sc, "\nEXIT=") })
	if !strings.Contains(sc, "→ approve (user by user:tmux-alice") || !strings.Contains(sc, "\nEXIT=0") {
		t.Errorf("the terminal does not show the approval by tmux-alice:\n%s", sc)
	}
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		out, _, _ := runCLI(t, "--nats-url", h.url, "escalation", "show", "tmux-esc-1")
		if !strings.Contains(out, "→ approved by user:tmux-alice") {
			return errors.New(out)
		}
		return nil
	})
	if _, err := presence(); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("after heed confirm returned: %v, want no responders", err)
	}
}
