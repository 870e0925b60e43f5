package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/embedded"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/healer"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/learner"
	"github.com/heedhq/heed/services/runner"
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
			return runner.Run(ctx, rt, runner.Config{ToolsFile: o.toolsFile, SweepEvery: o.sweepEvery, SweepQuiet: o.sweepQuiet, AbandonAfter: o.abandonAfter})
		}},
		{"confirm-router", func(ctx context.Context, rt *service.Runtime) error {
			return confirm.Run(ctx, rt, confirm.Config{RulesFile: o.rulesFile})
		}},
		{"learner", learner.Run},
		{"healer", func(ctx context.Context, rt *service.Runtime) error {
			return healer.Run(ctx, rt, healer.Config{ToolsFile: o.toolsFile, RulesFile: o.healerConfig})
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
	var dataDir, listen, natsConfig, logLevel, toolsFile, rulesFile, healerConfig, metricsListen, natsMonitor string
	var health service.HealthConfig
	var replicas int
	var sweepEvery, sweepQuiet, abandonAfter time.Duration
	var syncAlways bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run heed: an embedded NATS server (or --nats-url) plus every service",
		Long: `Run heed in one process: an embedded nats-server with JetStream on --data,
listening on --nats-listen (loopback by default) so the nats CLI and agents in
any language can connect, plus every service. With --nats-url (or
HEED_NATS_URL) no server is embedded; the services use that server or cluster.
SIGINT/SIGTERM drain every consumer, flush and stop with exit status 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := service.NewLogger(os.Stderr, logLevel)
			return runUp(cmd.Context(), log, upOptions{
				dataDir: dataDir, listen: listen, natsURL: g.natsURL, natsConfig: natsConfig, replicas: replicas, toolsFile: toolsFile, rulesFile: rulesFile, healerConfig: healerConfig,
				sweepEvery: sweepEvery, sweepQuiet: sweepQuiet, abandonAfter: abandonAfter, syncAlways: syncAlways,
				metricsListen: metricsListen, natsMonitor: natsMonitor, health: health,
			}, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dataDir, "data", defaultDataDir(), "JetStream data directory for the embedded server ($HEED_DATA)")
	cmd.Flags().StringVar(&listen, "nats-listen", "127.0.0.1:4222", "host:port the embedded server listens on")
	cmd.Flags().StringVar(&natsConfig, "nats-config", "", "nats-server config file for the embedded server")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&toolsFile, "tools", "", "tools file for the runner (see docs/SKILLS.md)")
	cmd.Flags().StringVar(&rulesFile, "rules", "", "confirmation rules for the confirm router (see docs/CONFIRMATIONS.md)")
	cmd.Flags().StringVar(&healerConfig, "healer-config", "", "healer patterns file (default: built-in patterns; see docs/HEALING.md)")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "stream and bucket replicas (3 on a cluster)")
	cmd.Flags().BoolVar(&syncAlways, "sync-always", false, "the embedded server writes and fsyncs every event before acknowledging it: nothing acknowledged is lost to a crash, at a twentieth of the throughput (docs/OPERATIONS.md)")
	cmd.Flags().DurationVar(&sweepEvery, "sweep-every", 15*time.Second, "how often the runner reconciles runs that have been quiet (docs/ARCHITECTURE.md, the sweep)")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus metrics of every service at GET /metrics on this address (e.g. 127.0.0.1:9090; docs/OPERATIONS.md, Metrics)")
	cmd.Flags().StringVar(&natsMonitor, "nats-monitor", "", "enable the embedded server's HTTP monitoring (/varz, /jsz…) on this address (e.g. 127.0.0.1:8222)")
	cmd.Flags().Uint64Var(&health.LagThreshold, "health-lag", 10000, "a service whose consumer has more events than this not finished is degraded")
	cmd.Flags().DurationVar(&health.StallAfter, "health-stall", 60*time.Second, "a service whose consumer has events waiting and has taken none for this long is degraded")
	cmd.Flags().DurationVar(&sweepQuiet, "sweep-quiet", 30*time.Second, "how long a run must have been quiet before the sweep reconciles it")
	cmd.Flags().DurationVar(&abandonAfter, "abandon-after", runner.DefaultAbandonAfter, "end a run with no event for this long as abandoned (any driver; negative: never)")
	return cmd
}

type upOptions struct {
	dataDir, listen, natsURL, natsConfig string
	toolsFile, rulesFile, healerConfig   string
	replicas                             int
	sweepEvery, sweepQuiet, abandonAfter time.Duration
	syncAlways                           bool
	metricsListen, natsMonitor           string
	health                               service.HealthConfig
}

type writer interface{ Write([]byte) (int, error) }

func runUp(ctx context.Context, log *slog.Logger, o upOptions, out writer) error {
	url := o.natsURL
	if url == "" {
		url = os.Getenv("HEED_NATS_URL")
	}
	var srv *embedded.Server
	if url == "" {
		if err := os.MkdirAll(o.dataDir, 0o755); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		var err error
		sysPass, err := systemPassword(o.dataDir)
		if err != nil {
			return err
		}
		srv, err = embedded.Start(embedded.Config{DataDir: o.dataDir, Listen: o.listen, ConfigFile: o.natsConfig, Logger: log, SyncAlways: o.syncAlways,
			MonitorListen: o.natsMonitor, SystemPassword: sysPass})
		if err != nil {
			return err
		}
		url = srv.URL()
		fmt.Fprintf(out, "heed: embedded NATS listening on %s (JetStream data in %s)\n", url, o.dataDir)
		if srv.SystemAccount() != nil && srv.SystemAccount().Name == "SYS" {
			fmt.Fprintf(out, "heed: NATS system user %s, password in %s\n", embedded.SystemUser, filepath.Join(o.dataDir, systemPasswordFile))
		}
		if o.natsMonitor != "" {
			fmt.Fprintf(out, "heed: NATS monitoring on http://%s\n", srv.MonitorAddr())
		}
	} else {
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
		rt, err := service.Connect(ctx, s.name, url, log, topo)
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
	if runCtx.Err() == nil {
		fmt.Fprintf(out, "heed: services running: %v\n", names)
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
	for len(rt.Health().Checks) == 0 {
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
