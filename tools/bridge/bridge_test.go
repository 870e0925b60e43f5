package bridge_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/embedded"
	"github.com/nats-io/nats.go"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/tools/bridge"
	"github.com/heedhq/heed/tools/bridge/internal/bridgetest"
)

var (
	start = func(t *testing.T) *heedclient.Client { return bridgetest.Start(t) }
	ask   = bridgetest.Ask
)

func next(t *testing.T, ch <-chan bridge.Update) bridge.Update {
	t.Helper()
	select {
	case u, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no update within 10 s")
	}
	return bridge.Update{}
}

// TestWatchOffersWhatThePersonMayAnswer: a request another person must
// answer is not offered, a route by skill filters, an open request from
// before the watch is offered first, an answer elsewhere closes the offer
// with who answered and where, and a second answer learns who won.
func TestWatchOffersWhatThePersonMayAnswer(t *testing.T) {
	c := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := ask(t, c, events.ConfirmRequestedData{Message: "asked before the watch", TimeoutS: 600, Skill: "deploy"})
	ch, err := bridge.Watch(ctx, c, "alice", bridge.Routing{Routes: []bridge.Route{{Skills: []string{"dep*"}}}})
	if err != nil {
		t.Fatal(err)
	}
	u := next(t, ch)
	if u.Offer.ID != before || u.Closed {
		t.Fatalf("first update %+v, want the open request %s", u, before)
	}
	if u.Offer.Deadline.IsZero() || time.Until(u.Offer.Deadline) < 9*time.Minute {
		t.Fatalf("deadline %v: want about 10 minutes from now (the router's schedule)", u.Offer.Deadline)
	}
	_ = ask(t, c, events.ConfirmRequestedData{Message: "for bob only", Skill: "deploy", Approvers: []string{"bob"}})
	_ = ask(t, c, events.ConfirmRequestedData{Message: "another skill", Skill: "backup"})
	mine := ask(t, c, events.ConfirmRequestedData{Message: "for alice", Skill: "deploy", Approvers: []string{"alice", "carol"}})
	u = next(t, ch)
	if u.Offer.ID != mine || u.Closed {
		t.Fatalf("update %+v, want the offer %s (bob's and the other skill's passed by)", u, mine)
	}
	if u.Offer.Message != "for alice" || len(u.Offer.Options) != 2 || u.Offer.Default == "" {
		t.Fatalf("offer %+v", u.Offer)
	}
	// carol answers from somewhere else: alice's offer closes, saying so.
	if _, err := bridge.Answer(ctx, c, mine, "proceed", "carol", "slack", ""); err != nil {
		t.Fatal(err)
	}
	u = next(t, ch)
	if u.Offer.ID != mine || !u.Closed || u.Winner == nil || u.Winner.By != "carol" || u.Winner.Channel != "slack" {
		t.Fatalf("update %+v (winner %+v), want %s closed by carol via slack", u, u.Winner, mine)
	}
	if got, want := u.Winner.Describe(u.Offer), "Approve by carol via slack"; got != want {
		t.Fatalf("describe %q, want %q", got, want)
	}
	// alice clicks too late.
	_, err = bridge.Answer(ctx, c, mine, "cancel", "alice", "desktop", "")
	a, ok := bridge.IsAnswered(err)
	if !ok || a.Winner.By != "carol" {
		t.Fatalf("late answer: %v, want already answered by carol", err)
	}
}

func TestRouteMatches(t *testing.T) {
	risk := 0.8
	esc := bridge.Offer{Skill: "", EscalationID: "e1", Tier: "tier2", Environment: "prod", Risk: &risk}
	run := bridge.Offer{Skill: "deploy_web"}
	cases := []struct {
		route     bridge.Route
		esc, runs bool
	}{
		{bridge.Route{}, true, true},
		{bridge.Route{Skills: []string{"deploy_*"}}, false, true},
		{bridge.Route{Tiers: []string{"tier2"}}, true, false},
		{bridge.Route{Tiers: []string{"top"}}, false, false},
		{bridge.Route{Environments: []string{"prod"}}, true, false},
		{bridge.Route{Escalations: "only"}, true, false},
		{bridge.Route{Escalations: "none"}, false, true},
	}
	for _, c := range cases {
		if got := c.route.Matches(esc); got != c.esc {
			t.Errorf("%+v on an escalation offer: %v, want %v", c.route, got, c.esc)
		}
		if got := c.route.Matches(run); got != c.runs {
			t.Errorf("%+v on a run's offer: %v, want %v", c.route, got, c.runs)
		}
	}
}

// TestWatchSurvivesANATSRestart: the server restarts under the watch; a
// request answered while the watch was down is reported closed, one asked
// after the restart is offered, and nothing is offered twice.
func TestWatchSurvivesANATSRestart(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	startServer := func() *embedded.Server {
		s, err := embedded.Start(embedded.Config{DataDir: dir, Listen: listen, Logger: eventstest.Logger(t)})
		if err != nil {
			t.Fatalf("start nats-server: %v", err)
		}
		return s
	}
	srv := startServer()
	t.Cleanup(func() { srv.Stop() })
	env := &eventstest.Env{Server: srv, Dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	{
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		bus, err := events.NewBus(nc, codec(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := events.Provision(ctx, bus.JetStream(), events.DefaultTopology()); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	bridgetest.StartServices(t, env)
	c, err := heedclient.Connect(ctx, srv.URL(), heedclient.NATSOptions{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	other, err := heedclient.Connect(ctx, srv.URL(), heedclient.NATSOptions{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)

	first := ask(t, c, events.ConfirmRequestedData{Message: "before the restart", TimeoutS: 600})
	ch, err := bridge.Watch(ctx, c, "alice", bridge.Routing{})
	if err != nil {
		t.Fatal(err)
	}
	if u := next(t, ch); u.Offer.ID != first || u.Closed {
		t.Fatalf("update %+v, want the offer %s", u, first)
	}
	srv.Stop()
	srv = startServer()
	// Answered as soon as the server is back, before the watch is taken up.
	eventstest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		_, err := other.Answer(ctx, command.AnswerConfirmation{ID: first, Choice: "proceed", By: "carol", Channel: "cli"})
		return err
	})
	second := ask(t, other, events.ConfirmRequestedData{Message: "after the restart", TimeoutS: 600})
	seen := map[string]int{}
	var closedFirst, offeredSecond bool
	deadline := time.After(40 * time.Second)
	for !closedFirst || !offeredSecond {
		select {
		case u, ok := <-ch:
			if !ok {
				t.Fatal("the watch ended")
			}
			switch {
			case u.Closed && u.Offer.ID == first:
				if u.Winner == nil || u.Winner.By != "carol" {
					t.Fatalf("closed %s with winner %+v, want carol", first, u.Winner)
				}
				closedFirst = true
			case !u.Closed:
				seen[u.Offer.ID]++
				if seen[u.Offer.ID] > 1 || u.Offer.ID == first {
					t.Fatalf("offered %s again after the restart", u.Offer.ID)
				}
				offeredSecond = offeredSecond || u.Offer.ID == second
			}
		case <-deadline:
			t.Fatalf("after the restart: first closed %v, second offered %v", closedFirst, offeredSecond)
		}
	}
}

func codec(t *testing.T) *events.Codec {
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	return events.NewCodec(v)
}

// TestWatchKeepsToTheTiersChannels: an escalation offer whose tier lists
// alice's channels without desktop is not offered on her desktop; one
// listing desktop is.
func TestWatchKeepsToTheTiersChannels(t *testing.T) {
	c := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch, err := bridge.Watch(ctx, c, "alice", bridge.Routing{Channel: "desktop"})
	if err != nil {
		t.Fatal(err)
	}
	_ = ask(t, c, events.ConfirmRequestedData{Message: "slack only", Approvers: []string{"alice"},
		Context: map[string]any{"escalation_id": "e1", "tier": "tier1", "channels": map[string]any{"alice": []any{"slack", "terminal"}}}})
	on := ask(t, c, events.ConfirmRequestedData{Message: "desktop too", Approvers: []string{"alice"},
		Context: map[string]any{"escalation_id": "e2", "tier": "tier1", "channels": map[string]any{"alice": []any{"slack", "desktop"}}}})
	u := next(t, ch)
	if u.Offer.ID != on {
		t.Fatalf("offered %s (%s), want %s: the other's tier keeps alice on slack and terminal", u.Offer.ID, u.Offer.Message, on)
	}
	if got := u.Offer.Channels["alice"]; len(got) != 2 || got[1] != "desktop" {
		t.Fatalf("channels %v", u.Offer.Channels)
	}
	if !u.Offer.OnChannel("alice", "desktop") || u.Offer.OnChannel("alice", "terminal") || !u.Offer.OnChannel("bob", "terminal") {
		t.Fatal("OnChannel: alice on desktop yes, on terminal no, bob (no list) anywhere")
	}
}

// TestOfferIsSafeToShow: what a requester wrote reaches a desktop or a
// chat without escape sequences or direction marks (an override could make
// "Deny" read as something else, or a message hide a line); the option's
// value, which the answer sends back, is kept as it was.
func TestOfferIsSafeToShow(t *testing.T) {
	st := &confirmation.State{ID: "c-1", Request: &events.ConfirmRequestedData{
		Title:   "Deploy \u202eprod\u202c",
		Message: "line one\n\x1b[2Jline two \u2066x\u2069",
		Options: []events.Option{{Label: "Ship \u202eti\u202c", Value: "proceed"}, {Label: "Stop", Value: "cancel"}},
	}}
	o := bridge.NewOffer(st)
	if want := `Deploy \u202eprod\u202c`; o.Title != want {
		t.Errorf("title %q, want %q", o.Title, want)
	}
	if want := "line one\n" + `\x1b[2Jline two \u2066x\u2069`; o.Message != want {
		t.Errorf("message %q, want %q", o.Message, want)
	}
	if want := `Ship \u202eti\u202c`; o.Options[0].Label != want || o.Options[0].Value != "proceed" {
		t.Errorf("option %+v, want label %q and value proceed", o.Options[0], want)
	}
}
