package client_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/access"
	"github.com/heedhq/heed/lib/embedded"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
)

// countReads counts the direct gets of HEED_EVENTS that name id (in the
// subject or the request), as any client on the server can see them.
func countReads(t *testing.T, url, id string) *atomic.Int64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int64
	for _, subj := range []string{"$JS.API.DIRECT.GET." + events.EventStream, "$JS.API.DIRECT.GET." + events.EventStream + ".>"} {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
			if strings.Contains(m.Subject, id) || bytes.Contains(m.Data, []byte(id)) {
				n.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// A follower of an aggregate nothing happens to reads it again less and
// less often: a finished run's page left open must not cost a read a
// second for as long as it stays open.
func TestFollowerIdleReadsBackOff(t *testing.T) {
	env := eventstest.Start(t)
	c, err := client.Connect(context.Background(), env.URL(), client.Name("follow-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ask(t, ctx, bus, "idle1")
	reads := countReads(t, env.URL(), "idle1")

	fctx, stop := context.WithCancel(ctx)
	seen := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.FollowStored(fctx, events.SubjectFilter("confirm", "idle1"), 0, func(uint64, *events.Event) error {
			seen <- struct{}{}
			return nil
		})
	}()
	<-seen
	time.Sleep(5 * time.Second)
	stop()
	if err := <-done; err != context.Canceled {
		t.Fatalf("FollowStored = %v, want context.Canceled", err)
	}
	// A read, then again after 5, 20, 80, 320 ms and 1.28 s (in case
	// something published before the subscription was stored after the
	// read), then not before 6.8 s. Reading once a second would be 9.
	if got := reads.Load(); got > 7 {
		t.Errorf("%d reads in 5 s of an idle follower, want at most 7", got)
	}
}

// A follower idle for long reads again as soon as its connection is back
// after a reconnect: what was stored while it was away was never heard.
func TestFollowerReadsAgainAfterReconnect(t *testing.T) {
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", eventstest.FreePort(t))
	start := func() *embedded.Server {
		s, err := embedded.Start(embedded.Config{DataDir: dir, Listen: listen, ServerName: "follow-test", Logger: eventstest.Logger(t)})
		if err != nil {
			t.Fatalf("start nats-server: %v", err)
		}
		return s
	}
	srv := start()
	t.Cleanup(func() { srv.Stop() })
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	env := &eventstest.Env{Server: srv, Dir: dir, Codec: events.NewCodec(v)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus := env.Bus(t)
	if err := events.Provision(ctx, bus.JetStream(), events.DefaultTopology()); err != nil {
		t.Fatal(err)
	}
	bus.Conn().Close()

	c, err := client.Connect(ctx, srv.URL(), client.Name("follow-test"),
		client.NATSOptions{nats.ReconnectWait(300 * time.Millisecond), nats.ReconnectJitter(0, 0), nats.MaxReconnects(-1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)

	pub, err := events.NewBus(mustConnect(t, srv.URL()), env.Codec)
	if err != nil {
		t.Fatal(err)
	}
	ask(t, ctx, pub, "away1")
	pub.Conn().Close()

	seen := make(chan string, 4)
	go func() {
		_ = c.FollowStored(ctx, events.SubjectFilter("confirm", "away1"), 0, func(_ uint64, ev *events.Event) error {
			seen <- ev.ID()
			return nil
		})
	}()
	if id := <-seen; id != "away1/requested" {
		t.Fatalf("first event %q", id)
	}
	// Past the follower's quick re-reads: its next read is seconds away.
	time.Sleep(2 * time.Second)

	srv.Stop()
	srv = start()
	// Stored before the follower's connection is back (it tries every
	// 300 ms): its subscription never hears it.
	pub2, err := events.NewBus(mustConnect(t, srv.URL()), env.Codec)
	if err != nil {
		t.Fatal(err)
	}
	answer(t, ctx, pub2, "away1", "away1/a1", "proceed", "alice")
	published := time.Now()
	select {
	case id := <-seen:
		if id != "away1/a1" {
			t.Fatalf("next event %q, want the answer", id)
		}
		t.Logf("seen %v after it was stored", time.Since(published).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("the answer stored while the follower was reconnecting was not seen within 3 s")
	}
}

func mustConnect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// A role that may not delete consumers (the console's, a bridge's) is
// refused once: later watches leave their consumers to expire without
// asking, so the server does not log a violation per watch.
func TestFollowNewAsksToDeleteOnceWhenRefused(t *testing.T) {
	dir := t.TempDir()
	conf, err := access.ServerConfig([]access.User{
		{Name: "svc", Role: access.RoleService, Password: "svc-pw"},
		{Name: "console", Role: access.RoleConsole, Password: "console-pw"},
	})
	if err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(dir, "heed.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:-1", ConfigFile: confFile, Logger: eventstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc, err := nats.Connect(srv.URL(), nats.UserInfo("svc", "svc-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	bus, err := events.NewBus(svc, events.NewCodec(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Provision(ctx, bus.JetStream(), events.DefaultTopology()); err != nil {
		t.Fatal(err)
	}

	var refusedDeletes atomic.Int64
	c, err := client.Connect(ctx, srv.URL(), client.Name("console-test"), client.NATSOptions{
		nats.UserInfo("console", "console-pw"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(err.Error(), "CONSUMER.DELETE") {
				refusedDeletes.Add(1)
			}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for i := range 3 {
		id := fmt.Sprintf("del%d", i)
		ask(t, ctx, bus, id)
		fctx, stop := context.WithCancel(ctx)
		err := c.FollowNew(fctx, events.SubjectFilter("confirm", id), 0, func(uint64, *events.Event) error {
			stop() // seen: the watch ends, its consumer is left
			return nil
		})
		if err != context.Canceled {
			t.Fatalf("FollowNew %d = %v", i, err)
		}
		// The delete is asked for in the background.
		time.Sleep(300 * time.Millisecond)
	}
	if got := refusedDeletes.Load(); got != 1 {
		t.Errorf("%d consumer deletes refused for 3 watches, want 1 (then none asked for)", got)
	}
}
