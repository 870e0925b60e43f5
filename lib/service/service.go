// Package service is the small runtime every heed service shares: its own
// NATS connection, its own codec and bus (services never share memory, even
// inside `heed up`), provisioning, a health endpoint and signal handling.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/natsconn"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
)

// DefaultNATSURL is where services and the CLI look for NATS unless told
// otherwise.
const DefaultNATSURL = events.DefaultNATSURL

// Version is heed's version, reported by health checks.
const Version = "0.1.0"

// NATSURL returns flagValue, else $HEED_NATS_URL, else DefaultNATSURL.
func NATSURL(flagValue string) string { return events.NATSURL(flagValue) }

// Runtime is one service's connection to heed.
type Runtime struct {
	Name     string
	Conn     *nats.Conn
	Bus      *events.Bus
	Log      *slog.Logger
	Topology events.Topology
	// Metrics are the service's own Prometheus registry and families.
	Metrics *Metrics

	mu sync.Mutex
	// lease is the active instance's, when the service runs with one: read
	// before every command and delivery (Current), so without the lock.
	lease  atomic.Pointer[Lease]
	checks map[string]func() any
	micro  micro.Service
	hcfg   HealthConfig
	watch  map[string]*watched // durable consumers, by stream/name
	done   chan struct{}
	closed sync.Once
}

// Current is nil while this instance may act: it runs without a lease,
// or its lease is fresh (Lease.Fresh). Otherwise it is an unavailable
// error: a command's caller asks again and reaches the active instance.
// Commands check it before they act (command.Gate).
func (rt *Runtime) Current() error {
	if rt.lease.Load().Fresh() {
		return nil
	}
	return events.Errorf(events.CodeUnavailable, "heed-%s: this instance has not refreshed its lease for most of its TTL (paused, or cut off): another may be active; ask again", rt.Name)
}

// connect connects to url, trying again while no server answers (NATS not
// up yet, or down: a service started then exited 1 at once, and its
// supervisor's restarts ran into systemd's start limit, leaving heed down
// once NATS came back), each attempt logged, until ctx ends. What no retry
// mends (credentials refused, a bad URL) fails at once.
func connect(ctx context.Context, url string, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	pause := 250 * time.Millisecond
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil || !errors.Is(err, nats.ErrNoServers) || ctx.Err() != nil {
			return nc, err
		}
		log.Warn("NATS does not answer yet; trying again", "url", url, "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// Connect opens the service's own connection (reconnecting forever), builds
// its codec and provisions the topology (idempotent). opts add to the
// connection's options: credentials and TLS (natsconn.Auth.Options).
func Connect(ctx context.Context, name, url string, log *slog.Logger, topo events.Topology, opts ...nats.Option) (*Runtime, error) {
	return connectRuntime(ctx, name, url, log, topo, false, opts...)
}

// ConnectWaiting is Connect for a service's own main: while no NATS
// server answers it waits (connect), where Connect fails at once (heed up
// given a mistyped --nats-url should say so, not wait).
func ConnectWaiting(ctx context.Context, name, url string, log *slog.Logger, topo events.Topology, opts ...nats.Option) (*Runtime, error) {
	return connectRuntime(ctx, name, url, log, topo, true, opts...)
}

func connectRuntime(ctx context.Context, name, url string, log *slog.Logger, topo events.Topology, wait bool, opts ...nats.Option) (*Runtime, error) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("service", name)
	dial := nats.Connect
	if wait {
		dial = func(url string, opts ...nats.Option) (*nats.Conn, error) { return connect(ctx, url, log, opts...) }
	}
	nc, err := dial(url, append([]nats.Option{
		nats.Name("heed-" + name),
		// A synchronous subscription gets a channel of this many slots.
		// The services' only ones are the batched direct gets of
		// events.ReadHistory (at most 256 messages and the end marker);
		// nats.go's default of 65,536 made every history read allocate
		// and clear 512 KB.
		nats.SyncQueueLen(1024),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "url", c.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			// Permission violations arrive here: a deployment whose
			// permissions leave out a subject the service needs.
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Error("NATS error", "err", err, "subscription", subject)
		}),
	}, opts...)...)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("connect to NATS at %s: %v", url, err), Err: err}
	}
	v, err := events.NewValidator()
	if err != nil {
		nc.Close()
		return nil, err
	}
	bus, err := events.NewBus(nc, events.NewCodec(v))
	if err != nil {
		nc.Close()
		return nil, err
	}
	if err := provision(ctx, bus, topo, log); err != nil {
		nc.Close()
		return nil, err
	}
	rt := &Runtime{Name: name, Conn: nc, Bus: bus, Log: log, Topology: topo, Metrics: NewMetrics(name),
		checks: map[string]func() any{}, watch: map[string]*watched{}, done: make(chan struct{})}
	rt.hcfg.defaults()
	bus.SetObserver(observer{Metrics: rt.Metrics, rt: rt})
	bus.SetLogger(log)
	go rt.pollLoop()
	return rt, nil
}

// ProvisionPatience is how long a starting service waits for JetStream to
// take its streams and buckets: a cluster that is starting too answers
// only once it has elected a meta leader, and processes start in any
// order.
const ProvisionPatience = 2 * time.Minute

// provision makes the topology, trying again (each try bounded) until
// JetStream answers or ProvisionPatience has passed.
func provision(ctx context.Context, bus *events.Bus, topo events.Topology, log *slog.Logger) error {
	deadline := time.Now().Add(ProvisionPatience)
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := events.Provision(pctx, bus.JetStream(), topo)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		log.Warn("JetStream did not take the streams yet (a cluster still electing its leader?); trying again", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// AddCheck adds a named section to the health report.
func (r *Runtime) AddCheck(name string, f func() any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[name] = f
}

// SetUp reports whether the service has set up: its entry point registers
// its health checks once its consumers and commands exist, so a registered
// check is what heed up (before it says ready) and tests wait for.
func (r *Runtime) SetUp() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.checks) > 0
}

// Health is what a health check returns.
type Health struct {
	Service   string   `json:"service"`
	Status    string   `json:"status"` // ok | degraded
	Reasons   []string `json:"reasons,omitempty"`
	Version   string   `json:"version"`
	Connected bool     `json:"connected"`
	// Consumers are the service's durable consumers, by name.
	Consumers map[string]ConsumerHealth `json:"consumers,omitempty"`
	Checks    map[string]any            `json:"checks,omitempty"`
}

// Status values of a health report.
const (
	StatusOK       = "ok"
	StatusDegraded = "degraded"
)

// Health reports the service's state: degraded, with the reasons, when it
// is not connected to NATS or one of its durable consumers is gone, lags
// past the threshold or has stopped (HealthConfig).
func (r *Runtime) Health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := Health{Service: r.Name, Status: StatusOK, Version: Version, Connected: r.Conn.IsConnected(), Checks: map[string]any{}}
	if !h.Connected {
		h.Reasons = append(h.Reasons, "not connected to NATS")
	}
	var reasons []string
	h.Consumers, reasons = r.consumerHealth(time.Now())
	h.Reasons = append(h.Reasons, reasons...)
	if len(h.Reasons) > 0 {
		h.Status = StatusDegraded
	}
	for k, f := range r.checks {
		h.Checks[k] = f()
	}
	return h
}

// HealthSubject is the request/reply subject of a service's health check.
func HealthSubject(name string) string { return "heed.svc." + name + ".health" }

// ServeHealth registers the service with NATS' micro framework (so `nats
// micro ls` finds it) with a health endpoint at heed.svc.<name>.health.
func (r *Runtime) ServeHealth() error {
	svc, err := micro.AddService(r.Conn, micro.Config{
		Name:        "heed-" + r.Name,
		Version:     Version,
		Description: "heed " + r.Name + " service",
	})
	if err != nil {
		return fmt.Errorf("register micro service: %w", err)
	}
	err = svc.AddEndpoint("health", micro.HandlerFunc(func(req micro.Request) {
		_ = req.RespondJSON(r.Health())
	}), micro.WithEndpointSubject(HealthSubject(r.Name)))
	if err != nil {
		return fmt.Errorf("health endpoint: %w", err)
	}
	r.micro = svc
	return nil
}

// Close stops the health endpoint and drains the connection, flushing
// everything published.
func (r *Runtime) Close() {
	r.closed.Do(func() { close(r.done) })
	if r.micro != nil {
		_ = r.micro.Stop()
	}
	if err := r.Conn.Drain(); err != nil {
		r.Conn.Close()
	}
	for i := 0; i < 100 && !r.Conn.IsClosed(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
}

// RunFunc is a service's library entry point: it runs until ctx is done,
// then drains and returns.
type RunFunc func(ctx context.Context, rt *Runtime) error

// Main is the body of a service's own main for separate deployment:
// flags (GNU style, --name value, as the heed CLI), logging, connection,
// health (NATS and optional HTTP), and a graceful drain on SIGINT/SIGTERM.
// It exits the process: 0 after a clean stop or --help, 1 on a failure,
// 2 on a bad flag or value (one line "heed-NAME: invalid_request: ..."
// and a usage hint).
func Main(name string, register func(fs *pflag.FlagSet) RunFunc) {
	f, run, err := ParseFlags(name, os.Args[1:], register, os.Stdout)
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "heed-%s: %s: %s\nRun 'heed-%s --help' for usage.\n", name, events.CodeOf(err), events.Message(err), name)
		os.Exit(2)
	}
	os.Exit(f.main(name, run))
}

// Flags are the flags every service's main takes.
type Flags struct {
	NATSURL string
	// Auth is how the service authenticates to NATS (credentials, TLS).
	Auth         *natsconn.Auth
	LogFormat    string
	HealthAddr   string
	LogLevel     slog.Level
	Replicas     int
	MetricsAddr  string
	LagThreshold uint64
	StallAfter   time.Duration
	// LeaseTTL is how long a stand-by waits after the active instance
	// stopped refreshing its lease (0: no lease, every instance active).
	LeaseTTL      time.Duration
	logLevelValue string
}

// ParseFlags parses a service main's arguments: the common flags and the
// ones register adds. A bad flag or value is an error with code
// invalid_request; --help prints the flags to out and returns
// pflag.ErrHelp.
func ParseFlags(name string, args []string, register func(fs *pflag.FlagSet) RunFunc, out io.Writer) (*Flags, RunFunc, error) {
	f := &Flags{}
	fs := pflag.NewFlagSet("heed-"+name, pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "heed-%s runs heed's %s service on its own, against the NATS server or cluster named by --nats-url.\n\nUsage:\n  heed-%s [flags]\n\nFlags:\n%s", name, name, name, fs.FlagUsages())
	}
	fs.StringVar(&f.NATSURL, "nats-url", "", "NATS server or cluster URL, comma-separated for several (default $HEED_NATS_URL or "+DefaultNATSURL+")")
	f.Auth = natsconn.AddFlags(fs)
	fs.StringVar(&f.LogFormat, "log-format", "json", "json (one object a line) or text")
	fs.StringVar(&f.HealthAddr, "health-listen", "", "also serve GET /healthz over HTTP on this address (e.g. :8081)")
	fs.StringVar(&f.logLevelValue, "log-level", "info", "debug, info, warn or error")
	fs.IntVar(&f.Replicas, "replicas", 1, "stream and bucket replicas (3 on a cluster)")
	fs.StringVar(&f.MetricsAddr, "metrics-listen", "", "serve Prometheus metrics at GET /metrics on this address (e.g. :9090)")
	fs.Uint64Var(&f.LagThreshold, "health-lag", 10000, "a consumer with more events than this not finished makes the service degraded")
	fs.DurationVar(&f.StallAfter, "health-stall", 60*time.Second, "a consumer with events waiting that has taken none for this long makes the service degraded")
	fs.DurationVar(&f.LeaseTTL, "lease-ttl", DefaultLeaseTTL, "one instance of the service is active; a second stands by and takes over this long after the active one stops refreshing its lease (0: no lease, docs/PRODUCTION.md)")
	run := register(fs)
	// The error is returned, not printed by pflag as well.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, nil, err // pflag has called fs.Usage
		}
		// Go's single-dash style (-log-level) was these mains' style once.
		for _, a := range args {
			if n, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "="); len(a) > 2 && a[0] == '-' && a[1] != '-' && fs.Lookup(n) != nil {
				return nil, nil, events.Errorf(events.CodeInvalidRequest, "%v (flags take two dashes: --%s)", err, n)
			}
		}
		return nil, nil, events.Errorf(events.CodeInvalidRequest, "%v", err)
	}
	if fs.NArg() > 0 {
		return nil, nil, events.Errorf(events.CodeInvalidRequest, "unexpected argument %q (heed-%s takes only flags)", fs.Arg(0), name)
	}
	l, err := ParseLogLevel(f.logLevelValue)
	if err != nil {
		return nil, nil, err
	}
	f.LogLevel = l
	if f.LogFormat != "json" && f.LogFormat != "text" {
		return nil, nil, events.Errorf(events.CodeInvalidRequest, "--log-format %q: use json or text", f.LogFormat)
	}
	if err := f.Auth.Validate(); err != nil {
		return nil, nil, err
	}
	if f.LeaseTTL < 0 || (f.LeaseTTL > 0 && f.LeaseTTL < time.Second) {
		return nil, nil, events.Errorf(events.CodeInvalidRequest, "--lease-ttl %s: use 0 (no lease) or at least 1s (JetStream's shortest message TTL)", f.LeaseTTL)
	}
	if f.Replicas < 1 || f.Replicas > 5 {
		return nil, nil, events.Errorf(events.CodeInvalidRequest, "--replicas %d: JetStream takes 1 to 5", f.Replicas)
	}
	return f, run, nil
}

// LogLevels are the values --log-level takes.
var LogLevels = []string{"debug", "info", "warn", "error"}

// ParseLogLevel reads a --log-level value; anything else is an error with
// code invalid_request that names the levels (and the closest one).
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, events.Errorf(events.CodeInvalidRequest, "--log-level %q: use debug, info, warn or error%s", s, textutil.Hint(s, LogLevels))
}

func (f *Flags) main(name string, run RunFunc) int {
	log := NewLoggerFormat(os.Stderr, f.logLevelValue, f.LogFormat)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go ReleaseIdleMemory(ctx, log, IdleRelease{})
	topo := events.DefaultTopology()
	topo.Replicas = f.Replicas
	natsOpts, err := f.Auth.Options()
	if err != nil {
		log.Error("start failed", "err", err)
		return 1
	}
	rt, err := ConnectWaiting(ctx, name, NATSURL(f.NATSURL), log, topo, natsOpts...)
	if err != nil {
		if ctx.Err() != nil {
			log.Info("stopped before NATS answered")
			return 0
		}
		log.Error("start failed", "err", err)
		return 1
	}
	rt.SetHealthConfig(HealthConfig{LagThreshold: f.LagThreshold, StallAfter: f.StallAfter})
	if f.HealthAddr != "" {
		go serveHTTPHealth(ctx, f.HealthAddr, rt)
	}
	if f.MetricsAddr != "" {
		addr, err := ListenMetrics(ctx, f.MetricsAddr, prometheus.Gatherers{ProcessCollectors(), rt.Metrics.Registry}, log)
		if err != nil {
			log.Error("start failed: metrics listener", "err", err)
			return 1
		}
		log.Info("metrics", "url", "http://"+addr+"/metrics")
	}
	log.Info("started", "nats", rt.Conn.ConnectedUrlRedacted(), "auth", f.Auth.Describe(), "replicas", f.Replicas)
	// The NATS health endpoint (what `heed status` and `nats micro ls`
	// ask) is the active instance's: a stand-by joins it when it takes
	// over. --health-listen answers from the start (a stand-by is alive).
	serveHealth := func() bool {
		if err := rt.ServeHealth(); err != nil {
			log.Error("start failed", "err", err)
			return false
		}
		return true
	}
	var lease *Lease
	// The lease is kept through the drain, not only until SIGTERM: the
	// stand-by must not take over while this instance still finishes the
	// work it holds (a tool call made twice at once).
	keepCtx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeeping()
	kept := make(chan struct{})
	if f.LeaseTTL > 0 {
		// Health answers while standing by (ok, standing by), so that an
		// operator sees the stand-by; its consumers start only with the
		// lease.
		var active atomic.Bool
		rt.AddCheck("lease", func() any {
			if active.Load() {
				return "active"
			}
			return "standing by"
		})
		lease, err = AcquireLease(ctx, rt.Bus.JetStream(), topo, name, f.LeaseTTL, log)
		if err != nil {
			rt.Close()
			if errors.Is(err, context.Canceled) {
				log.Info("stopped while standing by")
				return 0
			}
			log.Error("start failed: lease", "err", err)
			return 1
		}
		active.Store(true)
		rt.lease.Store(lease)
		if !serveHealth() {
			rt.Close()
			return 1
		}
		go func() {
			defer close(kept)
			if err := lease.Keep(keepCtx); errors.Is(err, ErrLeaseLost) {
				// Not a drain: another instance may be doing this one's
				// work already (a tool call in flight here would overlap
				// with its retry there). Stop as a crash does; tool
				// processes die with this one.
				log.Error("exiting at once", "err", err)
				os.Exit(1)
			}
		}()
	} else if !serveHealth() {
		rt.Close()
		return 1
	}
	err = run(ctx, rt)
	if lease != nil {
		stopKeeping()
		<-kept // no refresh after the release
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		lease.Release(rctx)
		cancel()
	}
	rt.Close()
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("stopped with error", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

func serveHTTPHealth(ctx context.Context, addr string, rt *Runtime) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := rt.Health()
		if h.Status != "ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	srv := &http.Server{Addr: addr, Handler: mux, BaseContext: func(net.Listener) context.Context { return ctx }, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		rt.Log.Error("health listener", "err", err)
	}
}

// NewLogger returns a text slog logger at the named level.
func NewLogger(w *os.File, level string) *slog.Logger { return NewLoggerFormat(w, level, "text") }

// LogFormats are the values --log-format takes.
var LogFormats = []string{"text", "json"}

// NewLoggerFormat returns a slog logger at the named level writing format
// ("json": one object a line, for log collectors; else text).
func NewLoggerFormat(w io.Writer, level, format string) *slog.Logger {
	l, err := ParseLogLevel(level)
	if err != nil {
		l = slog.LevelInfo
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// DrainTimeout bounds a service's graceful stop.
const DrainTimeout = 10 * time.Second

// DrainContext returns a context for a graceful stop. It is detached from
// the (already cancelled) run context and bounded by DrainTimeout.
func DrainContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), DrainTimeout)
}
