// Package eventstest holds small helpers for tests against a real embedded
// nats-server: no mocks of NATS anywhere in heed.
package eventstest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/embedded"
	"github.com/nats-io/nats.go"
)

// Env is a provisioned heed environment on a fresh server.
type Env struct {
	Server *embedded.Server
	Dir    string
	Codec  *events.Codec
}

// Start runs a JetStream server on a random loopback port with its data in
// a fresh temporary directory, provisions heed's streams and stops it when
// the test ends.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartIn(t, t.TempDir())
}

// StartIn is Start with a given data directory (to test restarts).
func StartIn(t testing.TB, dir string) *Env {
	t.Helper()
	s, err := embedded.Start(embedded.Config{DataDir: dir, Listen: "127.0.0.1:-1", Logger: Logger(t)})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(s.Stop)
	v, err := events.NewValidator()
	if err != nil {
		t.Fatalf("validator: %v", err)
	}
	env := &Env{Server: s, Dir: dir, Codec: events.NewCodec(v)}
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := events.Provision(ctx, bus.JetStream(), events.DefaultTopology()); err != nil {
		t.Fatalf("provision: %v", err)
	}
	return env
}

// URL is the server's client URL.
func (e *Env) URL() string { return e.Server.URL() }

// Conn opens a new connection, closed when the test ends.
func (e *Env) Conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Bus opens a new connection and returns a Bus over it.
func (e *Env) Bus(t testing.TB) *events.Bus {
	t.Helper()
	b, err := events.NewBus(e.Conn(t), e.Codec)
	if err != nil {
		t.Fatalf("bus: %v", err)
	}
	return b
}

// CheckFor calls f until it returns nil or total elapses, sleeping between
// tries, and fails the test with f's last error (after nats-server's helper).
func CheckFor(t testing.TB, total, sleep time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(sleep)
	}
	t.Fatalf("condition not met after %s: %v", total, err)
}

// Logger returns a logger that writes through t.Log when HEED_TEST_LOG is
// set and discards otherwise, so passing tests stay quiet.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("HEED_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
