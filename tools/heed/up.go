package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	heedclient "github.com/heedhq/heed/client"
	"log/slog"
	"math"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/embedded"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/tool"
	"github.com/heedhq/heed/services/changesets"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/escalator"
	"github.com/heedhq/heed/services/healer"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/learner"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// landedServices are the services `heed up` runs, each with its own
// connection and state, as they would run in separate processes.
func landedServices(o upOptions) []struct {
	name string
	run  service.RunFunc
} {
	return []struct {
		name string
		run  service.RunFunc
	}{
		{"indexer", indexer.Run},
		{"runner", func(ctx context.Context, rt *service.Runtime) error {
			return runner.Run(ctx, rt, runner.Config{ToolsFile: o.toolsFile, SweepEvery: o.sweepEvery, SweepQuiet: o.sweepQuiet, AbandonAfter: o.abandonAfter, ChangeSetExpiry: o.changeSetExpiry})
		}},
		{"confirm-router", func(ctx context.Context, rt *service.Runtime) error {
			return confirm.Run(ctx, rt, confirm.Config{RulesFile: o.rulesFile})
		}},
		{"learner", learner.Run},
		{"healer", func(ctx context.Context, rt *service.Runtime) error {
			return healer.Run(ctx, rt, healer.Config{ToolsFile: o.toolsFile, RulesFile: o.healerConfig})
		}},
		{"escalator", func(ctx context.Context, rt *service.Runtime) error {
			return escalator.Run(ctx, rt, escalator.Config{ConfigFile: o.escalationConfig})
		}},
		{"changesets", func(ctx context.Context, rt *service.Runtime) error {
			return changesets.Run(ctx, rt, changesets.Config{ToolsFile: o.toolsFile, Expiry: o.changeSetExpiry})
		}},
	}
}

// defaultDataDir is $HEED_DATA, else $XDG_DATA_HOME/heed, else
// ~/.local/share/heed.
func defaultDataDir() string {
	if d := os.Getenv("HEED_DATA"); d != "" {
		return d
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "heed")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "heed")
	}
	return ".heed"
}

func newUpCmd(g *globals) *cobra.Command {
	var dataDir, listen, natsConfig, logLevel, toolsFile, rulesFile, healerConfig, escalationConfig, metricsListen, natsMonitor string
	var health service.HealthConfig
	var replicas int
	var sweepEvery, sweepQuiet, abandonAfter, changeSetExpiry time.Duration
	var syncAlways bool
	var cons consoleOptions
	var pprofListen string
	var memLimitMiB int64
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run heed: an embedded NATS server (or --nats-url) plus every service",
		Long: `Run heed in one process: an embedded nats-server with JetStream on --data,
listening on --nats-listen (loopback by default) so the nats CLI and agents in
any language can connect, plus every service. With --nats-url (or
HEED_NATS_URL, unless --data or --nats-listen is given) no server is
embedded; the services use that server or cluster.
Once ready it prints the client settings to copy into another terminal
(export HEED_NATS_URL=…, a nats context for the nats CLI).

One heed up per data directory: it holds a lock on --data/heed.lock, and a
second heed up on the same directory exits at once (status 2) naming the
first (its pid and where it listens). A port already taken (--nats-listen,
--nats-monitor, --metrics-listen) fails at once too (status 2).
SIGINT/SIGTERM drain every consumer, flush and stop with exit status 0.`,
		Example: `  heed up --data .heed --tools skills/tools.yaml
  heed up --data .heed --nats-listen 127.0.0.1:4333 --tools skills/tools.yaml --rules rules.yaml
  heed up --nats-url nats://nats.internal:4222 --replicas 3 --tools skills/tools.yaml
  heed up --metrics-listen 127.0.0.1:9090 --log-level debug`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := service.ParseLogLevel(logLevel); err != nil {
				return err
			}
			if err := checkUpFiles(toolsFile, rulesFile, healerConfig, replicas); err != nil {
				return err
			}
			if sweepQuiet < 0 {
				return badInput("--sweep-quiet %s: use a duration of 0 or more (0: the default, 30s)", sweepQuiet)
			}
			if err := checkEscalationConfig(escalationConfig); err != nil {
				return err
			}
			if cons.listen != "" {
				if _, _, err := cons.check("console-"); err != nil {
					return err
				}
			}
			log := g.logger(logLevel)
			setMemoryLimit(log, memLimitMiB, cmd.Flags().Changed("memory-limit-mib"))
			natsURL, err := upNATSURL(g.natsURL, cmd.Flags().Changed("data") || cmd.Flags().Changed("nats-listen"), cmd.OutOrStdout())
			if err != nil {
				return err
			}
			natsOpts, err := g.natsOptions()
			if err != nil {
				return err
			}
			return runUp(cmd.Context(), log, upOptions{
				dataDir: dataDir, listen: listen, natsURL: natsURL, natsConfig: natsConfig, replicas: replicas, toolsFile: toolsFile, rulesFile: rulesFile, healerConfig: healerConfig, escalationConfig: escalationConfig,
				sweepEvery: sweepEvery, sweepQuiet: sweepQuiet, abandonAfter: abandonAfter, changeSetExpiry: changeSetExpiry, console: cons, syncAlways: syncAlways,
				metricsListen: metricsListen, natsMonitor: natsMonitor, health: health, pprofListen: pprofListen, natsOpts: natsOpts,
			}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dataDir, "data", defaultDataDir(), "JetStream data directory for the embedded server ($HEED_DATA)")
	_ = cmd.MarkFlagDirname("data")
	cmd.Flags().StringVar(&listen, "nats-listen", "127.0.0.1:4222", "host:port the embedded server listens on")
	cmd.Flags().StringVar(&natsConfig, "nats-config", "", "nats-server config file for the embedded server")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&toolsFile, "tools", "", "tools file for the runner (see docs/SKILLS.md)")
	cmd.Flags().StringVar(&rulesFile, "rules", "", "confirmation rules for the confirm router (see docs/CONFIRMATIONS.md)")
	cmd.Flags().StringVar(&healerConfig, "healer-config", "", "healer patterns file (default: built-in patterns; see docs/HEALING.md)")
	cmd.Flags().StringVar(&cons.listen, "console-listen", "", "serve the web console on this host:port (needs --console-users; docs/CONSOLE.md)")
	cons.flags(cmd, "console-")
	cmd.Flags().DurationVar(&changeSetExpiry, "changeset-expiry", events.DefaultChangeSetExpiry, "how long a change set's items wait for decisions before they expire (docs/CHANGESETS.md)")
	cmd.Flags().StringVar(&escalationConfig, "escalation-config", "", "escalation config: tiers, risk rules, auto-approve rules, routing (default: built-in; see docs/ESCALATIONS.md)")
	_ = cmd.RegisterFlagCompletionFunc("log-level", completeChoices("debug", "info", "warn", "error"))
	for _, f := range []string{"tools", "rules", "healer-config", "escalation-config"} {
		_ = cmd.RegisterFlagCompletionFunc(f, completeYAML)
	}
	cmd.Flags().IntVar(&replicas, "replicas", 1, "stream and bucket replicas (3 on a cluster)")
	cmd.Flags().BoolVar(&syncAlways, "sync-always", false, "the embedded server writes and fsyncs every event before acknowledging it: nothing acknowledged is lost to a crash, at a twentieth of the throughput (docs/OPERATIONS.md)")
	cmd.Flags().DurationVar(&sweepEvery, "sweep-every", 15*time.Second, "how often the runner reconciles runs that have been quiet (docs/ARCHITECTURE.md, the sweep; negative: never)")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus metrics of every service at GET /metrics on this address (e.g. 127.0.0.1:9090; docs/OPERATIONS.md, Metrics)")
	cmd.Flags().StringVar(&natsMonitor, "nats-monitor", "", "enable the embedded server's HTTP monitoring (/varz, /jsz…) on this address (e.g. 127.0.0.1:8222)")
	cmd.Flags().Uint64Var(&health.LagThreshold, "health-lag", 10000, "a service whose consumer has more events than this not finished is degraded")
	cmd.Flags().DurationVar(&health.StallAfter, "health-stall", 60*time.Second, "a service whose consumer has events waiting and has taken none for this long is degraded")
	cmd.Flags().DurationVar(&sweepQuiet, "sweep-quiet", 30*time.Second, "how long a run must have been quiet before the sweep reconciles it")
	cmd.Flags().DurationVar(&abandonAfter, "abandon-after", runner.DefaultAbandonAfter, "end a run with no event for this long as abandoned (any driver; negative: never)")
	cmd.Flags().Int64Var(&memLimitMiB, "memory-limit-mib", defaultMemoryLimitMiB, "soft memory limit of the process (heed and its embedded server) in MiB: the Go garbage collector works harder as the heap nears it, instead of letting it grow to twice what is live; 0: no limit. $GOMEMLIMIT, when set, wins unless this flag is given (docs/OPERATIONS.md)")
	cmd.Flags().StringVar(&pprofListen, "pprof-listen", "", "serve Go's pprof profiles (/debug/pprof/) of heed and its embedded server on this host:port; off by default")
	return cmd
}

// defaultMemoryLimitMiB is heed up's soft memory limit. Without one the
// heap grows to twice what is live before a collection (GOGC 100): with
// 10,000 confirmations pending the live heap is about 150 MB and the RSS
// was about 400 MB. The limit is soft: above it the collector runs more
// often (at most about half the CPU), it never fails an allocation.
const defaultMemoryLimitMiB = 192

// setMemoryLimit applies the soft memory limit, unless GOMEMLIMIT is set
// and the flag was not given.
func setMemoryLimit(log *slog.Logger, mib int64, given bool) {
	if os.Getenv("GOMEMLIMIT") != "" && !given {
		return
	}
	if mib <= 0 {
		debug.SetMemoryLimit(math.MaxInt64)
		return
	}
	debug.SetMemoryLimit(mib << 20)
	log.Debug("soft memory limit", "mib", mib)
}

type upOptions struct {
	dataDir, listen, natsURL, natsConfig string
	toolsFile, rulesFile, healerConfig   string
	escalationConfig                     string
	replicas                             int
	sweepEvery, sweepQuiet, abandonAfter time.Duration
	changeSetExpiry                      time.Duration
	console                              consoleOptions
	syncAlways                           bool
	metricsListen, natsMonitor           string
	health                               service.HealthConfig
	pprofListen                          string
	// natsOpts authenticate every connection heed up opens (the global
	// --nats-creds and the rest): to a NATS server given by --nats-url, or
	// to an embedded one whose --nats-config asks for it.
	natsOpts []nats.Option
}

type writer interface{ Write([]byte) (int, error) }

// upNATSURL is the server heed up uses instead of embedding one: --nats-url,
// else $HEED_NATS_URL, unless --data or --nats-listen (embed) ask for an
// embedded server. The export heed up prints must not turn the next heed up
// in that shell into a second set of services on the first one's server:
// there, heed up --data meets the first's lock and says so.
func upNATSURL(flagURL string, embed bool, out writer) (string, error) {
	if flagURL != "" {
		if embed {
			return "", &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: "--nats-url uses a running NATS server, --data and --nats-listen are for the embedded one: give one or the other"}
		}
		return flagURL, nil
	}
	env := os.Getenv("HEED_NATS_URL")
	if env != "" && embed {
		fmt.Fprintf(out, "heed: HEED_NATS_URL=%s is set, but --data/--nats-listen ask for an embedded server: starting one (--nats-url %s would use that server instead)\n", env, env)
		return "", nil
	}
	return env, nil
}

// runUp runs heed: on the NATS server at o.natsURL, or on an embedded one
// when it is empty.
func runUp(ctx context.Context, log *slog.Logger, o upOptions, out writer) error {
	// One process, one releaser: the services and the embedded server
	// share the heap it gives back.
	relCtx, stopRelease := context.WithCancel(ctx)
	defer stopRelease()
	go service.ReleaseIdleMemory(relCtx, log, service.IdleRelease{})
	if o.pprofListen != "" {
		stop, err := servePprof(o.pprofListen, log)
		if err != nil {
			return err
		}
		defer stop()
		fmt.Fprintf(out, "heed: pprof on http://%s/debug/pprof/\n", o.pprofListen)
	}
	url := o.natsURL
	// The metrics address is listened on last, once every service runs:
	// a taken one is said at once instead (after the data directory's
	// lock, which names a heed up that holds both).
	metricsFree := func() error {
		if o.metricsListen == "" {
			return nil
		}
		return checkFree("--metrics-listen", o.metricsListen)
	}
	var srv *embedded.Server
	settings := clientSettings{}
	if url == "" {
		if err := os.MkdirAll(o.dataDir, 0o755); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		// One heed up per data directory: a second one fails here, at once,
		// naming the first, before it touches the store or the port.
		lock, err := lockDataDir(o.dataDir)
		if err != nil {
			if events.CodeOf(err) == events.CodeConflict {
				return &exitError{status: exitUsage, code: events.CodeOf(err), msg: events.Message(err)}
			}
			return err
		}
		defer lock.release()
		if err := metricsFree(); err != nil {
			return err
		}
		sysPass, err := systemPassword(o.dataDir)
		if err != nil {
			return err
		}
		srv, err = embedded.Start(embedded.Config{DataDir: o.dataDir, Listen: o.listen, ConfigFile: o.natsConfig, Logger: log, SyncAlways: o.syncAlways,
			MonitorListen: o.natsMonitor, SystemPassword: sysPass})
		if err != nil {
			return listenFailure(err)
		}
		url = srv.URL()
		settings.url = clientURL(url)
		if err := lock.setListen(settings.url); err != nil {
			log.Warn("data directory lock", "err", err)
		}
		fmt.Fprintf(out, "heed: embedded NATS listening on %s (JetStream data in %s)\n", url, o.dataDir)
		if srv.SystemAccount() != nil && srv.SystemAccount().Name == "SYS" {
			settings.sysPasswordFile = filepath.Join(o.dataDir, systemPasswordFile)
			fmt.Fprintf(out, "heed: NATS system user %s, password in %s\n", embedded.SystemUser, settings.sysPasswordFile)
		}
		if o.natsMonitor != "" {
			fmt.Fprintf(out, "heed: NATS monitoring on http://%s\n", srv.MonitorAddr())
		}
	} else {
		if err := metricsFree(); err != nil {
			return err
		}
		settings.url = url
		fmt.Fprintf(out, "heed: using NATS at %s\n", url)
	}
	stopServer := func() {
		if srv != nil {
			srv.Stop()
		}
	}
	topo := events.DefaultTopology()
	topo.Replicas = o.replicas

	var wg sync.WaitGroup
	errs := make(chan error, len(landedServices(o)))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var rts []*service.Runtime
	var names []string
	gather := prometheus.Gatherers{service.ProcessCollectors()}
	for _, s := range landedServices(o) {
		rt, err := service.Connect(ctx, s.name, url, log, topo, o.natsOpts...)
		if err != nil {
			cancel()
			wg.Wait()
			for _, r := range rts {
				r.Close()
			}
			stopServer()
			if ctx.Err() != nil {
				// SIGINT/SIGTERM while starting: a clean stop, not a failure.
				fmt.Fprintf(out, "heed: stopped\n")
				return nil
			}
			return err
		}
		if err := rt.ServeHealth(); err != nil {
			log.Warn("health endpoint", "service", s.name, "err", err)
		}
		rt.SetHealthConfig(o.health)
		gather = append(gather, rt.Metrics.Registry)
		rts = append(rts, rt)
		names = append(names, s.name)
	}
	// Every service starts at once. Provisioning leaves unchanged streams
	// and buckets alone (events.Provision), so no service updates a
	// stream while another creates its consumers on it. "Ready" means
	// every service has set up: each registers its health check once its
	// consumers exist.
	var starting sync.WaitGroup
	for i, s := range landedServices(o) {
		rt, done := rts[i], make(chan struct{})
		wg.Add(1)
		go func(run service.RunFunc) {
			defer wg.Done()
			defer close(done)
			if err := run(runCtx, rt); err != nil && runCtx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", rt.Name, err)
				cancel()
			}
		}(s.run)
		starting.Go(func() { waitStarted(runCtx, log, rt, done) })
	}
	starting.Wait()
	if o.metricsListen != "" && runCtx.Err() == nil {
		addr, err := service.ListenMetrics(runCtx, o.metricsListen, gather, log)
		if err != nil {
			log.Error("metrics listener", "err", err)
			cancel()
			errs <- fmt.Errorf("metrics listener: %w", err)
		} else {
			fmt.Fprintf(out, "heed: metrics on http://%s/metrics\n", addr)
		}
	}
	if o.console.listen != "" && runCtx.Err() == nil {
		addr, err := upConsole(runCtx, url, o.console, o.natsOpts, log)
		if err != nil {
			cancel()
			wg.Wait()
			for _, rt := range rts {
				rt.Close()
			}
			stopServer()
			return err
		}
		fmt.Fprintf(out, "heed: console on %s\n", addr)
	}
	if runCtx.Err() == nil {
		fmt.Fprintf(out, "heed: services running: %v\n", names)
		settings.print(out)
		fmt.Fprintf(out, "heed: ready (Ctrl-C to stop)\n")
	}

	<-runCtx.Done()
	fmt.Fprintf(out, "heed: stopping: draining services\n")
	cancel()
	wg.Wait()
	for _, rt := range rts {
		rt.Close()
	}
	stopServer()
	fmt.Fprintf(out, "heed: stopped\n")
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// waitStarted waits until a service has registered a health check (services
// do once their consumers exist), has stopped, or ctx is done.
func waitStarted(ctx context.Context, log *slog.Logger, rt *service.Runtime, done <-chan struct{}) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	slow := time.After(30 * time.Second)
	for !rt.SetUp() {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-slow:
			log.Warn("service is slow to start; not waiting for it", "service", rt.Name)
			return
		case <-tick.C:
		}
	}
}

// systemPasswordFile holds, in the data directory, the password of the
// embedded server's system user (made once, kept across restarts).
const systemPasswordFile = "nats-system-password"

func systemPassword(dir string) (string, error) {
	path := filepath.Join(dir, systemPasswordFile)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var raw [18]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	// Hex, so that the password never starts with "-" (a command line
	// such as nats --password "$(cat …)" would read it as a flag).
	p := hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(p+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("system user password: %w", err)
	}
	return p, nil
}

// checkUpFiles loads the files heed up hands its services before anything
// starts, so that a bad one is the caller's mistake said at once (exit 2),
// not a service failing after the server came up.
func checkUpFiles(toolsFile, rulesFile, healerConfig string, replicas int) error {
	if replicas < 1 || replicas > 5 {
		return badInput("--replicas %d: JetStream takes 1 to 5", replicas)
	}
	if toolsFile != "" {
		if _, err := tool.LoadFile(toolsFile); err != nil {
			return badInput("--tools: %s", flatten(err))
		}
	}
	if rulesFile != "" {
		if _, err := confirm.LoadRules(rulesFile); err != nil {
			return badInput("--rules: %s", flatten(err))
		}
	}
	if healerConfig != "" {
		if _, err := healer.LoadRules(healerConfig); err != nil {
			return badInput("--healer-config: %s", flatten(err))
		}
	}
	return nil
}

// checkEscalationConfig refuses a bad escalation config before anything
// starts (exit 2).
func checkEscalationConfig(path string) error {
	if path == "" {
		return nil
	}
	if _, err := escalator.LoadRules(path); err != nil {
		return badInput("--escalation-config: %s", flatten(err))
	}
	return nil
}

// listenFailure says in heed's words that the embedded server cannot
// listen, and which flag chooses another address.
func listenFailure(err error) error {
	var le *embedded.ListenError
	if !errors.As(err, &le) {
		return err
	}
	flag := le.What // a heed up flag, or what the embedded server listens for
	switch le.What {
	case "client":
		flag = "--nats-listen"
	case "monitor":
		flag = "--nats-monitor"
	}
	if !le.InUse() {
		return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: fmt.Sprintf("cannot listen on %s (%s): %v", le.Addr, flag, le.Err)}
	}
	host, _, _ := net.SplitHostPort(le.Addr)
	return &exitError{status: exitUsage, code: events.CodeConflict, msg: fmt.Sprintf("%s is already in use by another process (another heed up, or a nats-server?): stop it, or choose a free port with %s %s",
		le.Addr, flag, net.JoinHostPort(host, "PORT"))}
}

// checkFree fails, as listenFailure words it, if addr (given with flag)
// cannot be listened on now.
func checkFree(flag, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return listenFailure(&embedded.ListenError{What: flag, Addr: addr, Err: err})
	}
	return l.Close()
}

// clientURL is url as a client on this machine reaches it: a server
// listening on every interface is reached on loopback.
func clientURL(url string) string {
	u, err := neturl.Parse(url)
	if err != nil {
		return url
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return url
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		u.Host = net.JoinHostPort("127.0.0.1", port)
	}
	return u.String()
}

// clientSettings are the lines a person copies to reach this heed from
// another terminal: the heed CLI and agents, and the nats CLI.
type clientSettings struct {
	url             string
	sysPasswordFile string // the system user's password, when the server has one
}

func (s clientSettings) print(out writer) {
	fmt.Fprintln(out, "heed: client settings, for another terminal (heed, agents, the nats CLI):")
	fmt.Fprintf(out, "  export HEED_NATS_URL=%s\n", s.url)
	fmt.Fprintf(out, "  nats context save heed --server %s --select\n", s.url)
	if s.sysPasswordFile != "" {
		path := s.sysPasswordFile
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		fmt.Fprintf(out, "  nats context save heed-sys --server %s --user %s --password \"$(cat %s)\"\n", s.url, embedded.SystemUser, shellQuote(path))
	}
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:=@%+,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// upConsole serves the web console in heed up's process, on a client
// connection of its own (it is a channel, not a service).
func upConsole(ctx context.Context, url string, o consoleOptions, natsOpts []nats.Option, log *slog.Logger) (string, error) {
	users, routing, err := o.check("console-")
	if err != nil {
		return "", err
	}
	c, err := heedclient.Connect(ctx, url, heedclient.Name("heed-console"), heedclient.Source("heed/console"), heedclient.NATSOptions(natsOpts))
	if err != nil {
		return "", err
	}
	addr, done, err := startConsole(ctx, c, o, users, routing, log.With("service", "console"))
	if err != nil {
		c.Close()
		return "", err
	}
	go func() {
		if err := <-done; err != nil && ctx.Err() == nil {
			log.Error("console stopped", "err", err)
		}
		c.Close()
	}()
	return addr, nil
}
