// Package embedded runs an in-process nats-server with JetStream: the
// default for `heed up` on a laptop and the real server every test uses.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/crypto/bcrypt"
)

// Config configures the embedded server.
type Config struct {
	// DataDir holds JetStream's files; a restart on the same DataDir keeps
	// every stream, message and KV entry.
	DataDir string
	// Listen is host:port for clients. Port -1 picks a free port (tests).
	// The default, 127.0.0.1:4222, keeps the server on loopback.
	Listen string
	// ServerName names the server (JetStream needs a stable one across restarts).
	ServerName string
	// ConfigFile, if set, is a nats-server config file loaded first; the
	// fields above override it.
	ConfigFile string
	Logger     *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept clients.
	ReadyTimeout time.Duration
	// SyncAlways makes JetStream write (and fsync) every message before it
	// acknowledges it (sync_interval: always).
	SyncAlways bool
	// MonitorListen, if set, is host:port of the server's HTTP monitoring
	// (/varz, /jsz, /connz…).
	MonitorListen string
	// SystemPassword, if set, gives the server a system account (SYS) with
	// the user SystemUser and this password, so standard NATS tooling
	// (`nats server report jetstream`) works. Clients without credentials
	// keep working as before: they are the no-auth user heed, in the
	// global account that owns every stream heed has ever written. Ignored
	// when ConfigFile sets up accounts or users of its own.
	SystemPassword string
}

// SystemUser is the embedded server's system user (Config.SystemPassword).
const SystemUser = "heed-sys"

// NoAuthUser is the user clients without credentials are.
const NoAuthUser = "heed"

// ListenError says that an address the server must listen on is taken (or
// otherwise refused): Start reports it at once, before the server starts,
// or as soon as the server itself fails to listen.
type ListenError struct {
	What string // "client" or "monitor"
	Addr string // host:port
	Err  error
}

func (e *ListenError) Error() string {
	if e.InUse() {
		return fmt.Sprintf("embedded nats: the %s address %s is already in use by another process", e.What, e.Addr)
	}
	return fmt.Sprintf("embedded nats: cannot listen on the %s address %s: %v", e.What, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// InUse reports whether another process holds the address.
func (e *ListenError) InUse() bool {
	return errors.Is(e.Err, syscall.EADDRINUSE) || e.Err != nil && strings.Contains(e.Err.Error(), "address already in use")
}

// checkListen fails if nobody can listen on host:port now. Port 0 or -1
// (any free port) always passes.
func checkListen(what, host string, port int) error {
	if port <= 0 {
		return nil
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return &ListenError{What: what, Addr: addr, Err: err}
	}
	return l.Close()
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
}

// Start starts the server and waits until it accepts clients.
func Start(o Config) (*Server, error) {
	if o.DataDir == "" {
		return nil, errors.New("embedded nats: DataDir is required")
	}
	opts := &server.Options{}
	if o.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("embedded nats: config %s: %w", o.ConfigFile, err)
		}
	}
	host, port := "127.0.0.1", 4222
	if o.Listen != "" {
		h, p, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: listen address %q: %w", o.Listen, err)
		}
		if port, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("embedded nats: listen port %q: %w", p, err)
		}
		if h != "" {
			host = h
		}
	}
	opts.Host, opts.Port = host, port
	opts.ServerName = o.ServerName
	if opts.ServerName == "" {
		opts.ServerName = "heed"
	}
	opts.JetStream = true
	opts.StoreDir = o.DataDir
	if o.SyncAlways {
		opts.SyncAlways = true
	}
	if o.MonitorListen != "" {
		h, p, err := net.SplitHostPort(o.MonitorListen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: monitor address %q: %w", o.MonitorListen, err)
		}
		if opts.HTTPPort, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("embedded nats: monitor port %q: %w", p, err)
		}
		opts.HTTPHost = h
		if h == "" {
			opts.HTTPHost = "127.0.0.1"
		}
	}
	noAuthOnly := false // the only password without bcrypt is the no-auth user's empty one
	if o.SystemPassword != "" && opts.SystemAccount == "" && len(opts.Accounts) == 0 && len(opts.Users) == 0 && len(opts.Nkeys) == 0 && len(opts.TrustedOperators) == 0 {
		// Only the system account is configured, so the global account
		// ($G) stays the one JetStream account: a data directory from
		// before keeps its streams (they live under jetstream/$G).
		// bcrypt: the server keeps no plain password (and warns if it does).
		// The lowest cost: heed's password is random (see heed up), so the
		// hash's cost adds nothing, while every login pays it.
		hash, err := bcrypt.GenerateFromPassword([]byte(o.SystemPassword), bcrypt.MinCost)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: system password: %w", err)
		}
		sys := server.NewAccount("SYS")
		opts.Accounts = []*server.Account{sys}
		opts.SystemAccount = sys.Name
		opts.Users = []*server.User{
			{Username: NoAuthUser}, // no account: the global account
			{Username: SystemUser, Password: string(hash), Account: sys},
		}
		opts.NoAuthUser = NoAuthUser
		noAuthOnly = true
	}
	opts.NoSigs = true // heed owns SIGINT/SIGTERM and drains before the server stops
	opts.NoLog = false
	// A taken port is said at once, in our words, instead of after the
	// ready timeout with the server's log line.
	if err := checkListen("client", opts.Host, opts.Port); err != nil {
		return nil, err
	}
	if opts.HTTPPort > 0 {
		if err := checkListen("monitor", opts.HTTPHost, opts.HTTPPort); err != nil {
			return nil, err
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	// The server reports a failure to start (a port taken since the check
	// above, JetStream refusing its store) only through its logger's
	// Fatalf: the adapter hands it to the wait below.
	logger := slog.New(slog.DiscardHandler)
	if o.Logger != nil {
		logger = o.Logger
	}
	logs := &slogAdapter{l: logger.With("component", "nats-server"), fatal: make(chan string, 1), noAuthOnly: noAuthOnly}
	s.SetLoggerV2(logs, false, false, false)
	go s.Start()
	wait := o.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	for !s.ReadyForConnections(25 * time.Millisecond) {
		select {
		case msg := <-logs.fatal:
			s.Shutdown()
			return nil, startFailure(opts, msg)
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("embedded nats: not ready to accept clients on %s within %s", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)), wait)
		}
	}
	logs.started.Store(true)
	return &Server{Server: s}, nil
}

// startFailure turns the server's fatal log line into an error: a listen
// failure becomes a ListenError.
func startFailure(opts *server.Options, msg string) error {
	lower := strings.ToLower(msg)
	if strings.Contains(lower, "listening on port") || strings.Contains(lower, "monitor port") || strings.Contains(lower, "starting monitor") {
		what, addr := "client", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
		if strings.Contains(lower, "monitor") {
			what, addr = "monitor", net.JoinHostPort(opts.HTTPHost, strconv.Itoa(opts.HTTPPort))
		}
		return &ListenError{What: what, Addr: addr, Err: errors.New(msg)}
	}
	return fmt.Errorf("embedded nats: %s", msg)
}

// URL is the nats:// URL clients connect to.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it to finish, flushing JetStream.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

type slogAdapter struct {
	l       *slog.Logger
	fatal   chan string // the first fatal message, for Start
	started atomic.Bool // after Start returned, a fatal message is logged as an error
	// noAuthOnly: the server's plaintext-password warning is about the
	// no-auth user's empty password (the system user's is bcrypt), not a
	// password anyone could read: it would greet every heed up for nothing.
	noAuthOnly bool
}

const plaintextWarning = "Plaintext passwords detected, use nkeys or bcrypt"

func (a *slogAdapter) Noticef(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Warnf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	if a.noAuthOnly && msg == plaintextWarning {
		a.l.Debug(msg)
		return
	}
	a.l.Warn(msg)
}
func (a *slogAdapter) Fatalf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	if !a.started.Load() {
		// Start returns it as its error: logging it too would say it twice.
		a.l.Debug(msg)
		select {
		case a.fatal <- msg:
		default:
		}
		return
	}
	a.l.Error(msg)
}
func (a *slogAdapter) Errorf(f string, v ...any) { a.l.Error(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Debugf(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Tracef(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...)) }
