package embedded

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A taken client or monitor port fails Start at once with a ListenError
// that names the address, instead of after the ready timeout.
func TestStartReportsTakenPortAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().String()
	for _, c := range []struct {
		what string
		cfg  Config
	}{
		{"client", Config{DataDir: t.TempDir(), Listen: taken}},
		{"monitor", Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", MonitorListen: taken}},
	} {
		start := time.Now()
		s, err := Start(c.cfg)
		if err == nil {
			s.Stop()
			t.Fatalf("%s port %s taken: Start succeeded", c.what, taken)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s port taken: Start took %s to fail, want under a second", c.what, d)
		}
		var le *ListenError
		if !errors.As(err, &le) || !le.InUse() || le.What != c.what || le.Addr != taken {
			t.Fatalf("%s port taken: error %v (%#v), want a ListenError in use for %s", c.what, err, le, taken)
		}
		if want := "embedded nats: the " + c.what + " address " + taken + " is already in use by another process"; err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	}
}

// The server's own failure to listen (the port taken between the check and
// the server's listen) is mapped from its fatal log line, as nats-server
// words it, to the same ListenError.
func TestStartFailureFromServerLog(t *testing.T) {
	opts := &server.Options{Host: "127.0.0.1", Port: 4999, HTTPHost: "127.0.0.1", HTTPPort: 8999}
	for _, c := range []struct {
		msg, what string
		port      int
	}{
		{`Error listening on port: 127.0.0.1:4999, "listen tcp 127.0.0.1:4999: bind: address already in use"`, "client", 4999},
		{`Can't start monitoring: can't listen to the monitor port: listen tcp 127.0.0.1:8999: bind: address already in use`, "monitor", 8999},
		{`Error starting monitor on "127.0.0.1:8999": listen tcp 127.0.0.1:8999: bind: address already in use`, "monitor", 8999},
	} {
		err := startFailure(opts, c.msg)
		var le *ListenError
		if !errors.As(err, &le) || !le.InUse() || le.What != c.what || le.Addr != net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) {
			t.Errorf("%q: %v (%#v), want a ListenError in use for the %s port", c.msg, err, le, c.what)
		}
	}
	if err := startFailure(opts, "Can't start JetStream: boom"); err == nil || err.Error() != "embedded nats: Can't start JetStream: boom" {
		t.Errorf("another fatal error: %v", err)
	}
}

// heed's own no-auth user (an empty password) does not make the server
// warn about plaintext passwords on every start: the warning would be false.
func TestNoPlaintextWarningForTheNoAuthUser(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := Start(Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", SystemPassword: "pw", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "Plaintext") {
		t.Errorf("the server warned about plaintext passwords:\n%s", logs.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
