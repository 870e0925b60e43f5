// Package embedded runs an in-process nats-server with JetStream: the
// default for `heed up` on a laptop and the real server every test uses.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
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
	}
	opts.NoSigs = true // heed owns SIGINT/SIGTERM and drains before the server stops
	opts.NoLog = false
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if o.Logger != nil {
		s.SetLoggerV2(&slogAdapter{l: o.Logger.With("component", "nats-server")}, false, false, false)
	}
	go s.Start()
	wait := o.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !s.ReadyForConnections(wait) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready to accept clients on %s:%d within %s (port in use?)", host, port, wait)
	}
	return &Server{Server: s}, nil
}

// URL is the nats:// URL clients connect to.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it to finish, flushing JetStream.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a *slogAdapter) Tracef(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
