package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
)

// A present identity answers on its presence subject with its channels;
// after stop nobody answers ("no responders": unreachable), as the
// escalator asks with plain core NATS.
func TestPresentAnswersUntilStopped(t *testing.T) {
	c, _, ctx := setup(t)
	nc := c.Conn()
	ask := func(identity string) (events.PresenceReply, error) {
		var p events.PresenceReply
		m, err := nc.RequestWithContext(ctx, events.PresenceSubject(identity), nil)
		if err != nil {
			return p, err
		}
		return p, json.Unmarshal(m.Data, &p)
	}
	if _, err := ask("alice"); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("before Present: %v, want no responders", err)
	}
	stopTerm, err := c.Present(ctx, "alice", "terminal")
	if err != nil {
		t.Fatal(err)
	}
	stopChat, err := c.Present(ctx, "alice", "chat")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ask("alice")
	if err != nil || p.Identity != "alice" || !slices.Equal(p.Channels, []string{"chat", "terminal"}) {
		t.Fatalf("present: %+v, %v; want alice on chat and terminal", p, err)
	}
	if _, err := ask("bob"); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("bob, never present: %v, want no responders", err)
	}
	if _, err := c.Reachable(ctx, "bob"); events.CodeOf(err) != events.CodeUnavailable {
		t.Errorf("Reachable(bob) = %v, want unavailable", err)
	}
	stopChat()
	stopChat() // idempotent: terminal still holds alice
	if p, err := ask("alice"); err != nil || !slices.Equal(p.Channels, []string{"terminal"}) {
		t.Errorf("after the chat left: %+v, %v; want alice on terminal", p, err)
	}
	stopTerm()
	if _, err := ask("alice"); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("after stop: %v, want no responders", err)
	}
}

// Several processes of one person: each request is answered once (a queue
// group named after the identity), whichever process answers, and the
// person stays reachable while any one of them is present.
func TestPresentInSeveralProcesses(t *testing.T) {
	a, _, ctx := setup(t)
	b, err := client.Connect(ctx, a.Conn().ConnectedUrl(), client.Name("client-test-b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stopA, err := a.Present(ctx, "user:carol", "terminal")
	if err != nil {
		t.Fatal(err)
	}
	stopB, err := b.Present(ctx, "user:carol", "desktop")
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()
	// Count the answers to one request sent with a plain inbox: a queue
	// group delivers it to one member only.
	inbox := nats.NewInbox()
	replies, err := a.Conn().SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := a.Conn().PublishRequest(events.PresenceSubject("user:carol"), inbox, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Every answer, however slow (up to 10 s), then 300 ms more for a
	// second answer to any of them.
	got := 0
	for {
		wait := 300 * time.Millisecond
		if got < 10 {
			wait = 10 * time.Second
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		_, err := replies.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			break
		}
		got++
	}
	if got != 10 {
		t.Errorf("%d answers to 10 requests, want one each", got)
	}
	stopA()
	if p, err := b.Reachable(ctx, "user:carol"); err != nil || !slices.Equal(p.Channels, []string{"desktop"}) {
		t.Errorf("with one process left: %+v, %v; want carol on desktop", p, err)
	}
}
