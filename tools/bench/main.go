// Command heed-bench measures heed's event path against raw JetStream, in
// one run on one embedded nats-server, so that the ratio between the two is
// measured under identical conditions. `make bench` runs it; BENCHMARKS.md
// records the figures.
//
// The program is a list of named sections (see sections below); each runs
// against a shared benchEnv and returns a table. -only selects sections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/embedded"
	"github.com/nats-io/nats.go"
)

// section is one part of the benchmark. Add new ones to sections.
type section struct {
	name  string // used by -only
	title string
	run   func(ctx context.Context, env *benchEnv) (*result, error)
}

// sections run in this order. Planned: "step" (runner overhead per step)
// and "confirm" (confirmation request to answer latency); BENCHMARKS.md has
// a place for each.
var sections = []section{
	{name: "publish", title: "Publish: heed event path vs raw JetStream", run: runPublish},
	{name: "step", title: "Runner: overhead per step vs raw JetStream", run: runStep},
	{name: "confirm", title: "Confirmations: request → answer latency and 10,000 pending", run: runConfirm},
	{name: "approval", title: "Approvals: 1,000 pending answered by 50 callers, round trip, opening runs, 10,000 pending (heed up in its own process)", run: runApproval},
	{name: "escalation", title: "Escalations: 100 operations learned from, routing latency at 1,000 requests/s, 10,000 held (heed up in its own process)", run: runEscalation},
	{name: "changeset", title: "Change sets: 1,000 sets of 10 items proposed, decided item by item by 20 reviewers, applied (heed up in its own process)", run: runChangeSet},
	{name: "console", title: "Console: the inbox with 1,000 pending requests (heed up in its own process)", run: runConsole},
	{name: "mcp", title: "MCP: a tool call's overhead over the command it wraps (heed up in its own process)", run: runMCP},
	{name: "heal", title: "Healing and learning: load generator over 1,000 runs", run: runHeal},
}

// config is the command line.
type config struct {
	nAsync, nSync       int
	warmAsync, warmSync int
	rounds              int
	slices              int
	maxPending          int
	payload             int
	target              float64
	only                string
	dir                 string
	cpuProfile          string
	memProfile          string
	failOnMiss          bool
	timeout             time.Duration
	heedBin             string
	upPprof             string
	upArgs              string
	escWindows          int
	tripsOut            string
	approvalURL         string
	upHeap              string
	upTrace             string
	selfTrace           string
	approvals           int
	roundTrips          int
	pending             int
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("heed-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.nAsync, "n", 200000, "messages per async case per round")
	fs.IntVar(&c.nSync, "n-sync", 20000, "messages per sync case per round")
	fs.IntVar(&c.warmAsync, "warmup", 20000, "untimed async messages per case before the first round (sync cases warm up with a tenth)")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds; every case runs once per round, raw and heed interleaved, and the median is reported")
	fs.IntVar(&c.slices, "slices", 4, "slices per case and round; the cases of a round take turns slice by slice")
	fs.IntVar(&c.maxPending, "max-pending", 4096, "async publishes in flight at most (jetstream.WithPublishAsyncMaxPending)")
	fs.IntVar(&c.payload, "payload", 256, "size in bytes of the event data (and of the raw payload)")
	fs.Float64Var(&c.target, "target", 0.80, "heed async throughput must be at least this fraction of raw async")
	fs.StringVar(&c.only, "only", "", "comma-separated sections to run (default all): "+sectionNames())
	fs.StringVar(&c.dir, "dir", "", "parent of the temporary JetStream data directory (default the system temp dir)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the sections (client and embedded server, one process) to this file")
	fs.StringVar(&c.memProfile, "memprofile", "", "write an allocation profile to this file at the end")
	fs.BoolVar(&c.failOnMiss, "fail-on-miss", false, "exit with status 2 when a target is missed")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up after this long")
	fs.StringVar(&c.heedBin, "heed", "", "the heed binary the approval section runs as `heed up` (default: heed next to heed-bench, i.e. bin/heed)")
	fs.StringVar(&c.upPprof, "up-pprof", "", "approval section: give heed up a pprof listener on this host:port (--pprof-listen)")
	fs.StringVar(&c.upHeap, "up-heapprofile", "", "approval section: save heed up's heap profile with the pending confirmations held, at rest, to this file (needs -up-pprof)")
	fs.StringVar(&c.upTrace, "up-trace", "", "approval section: save heed up's Go execution trace of the measured round trips to this file (needs -up-pprof; go tool trace FILE, or go tool trace -pprof=sched FILE for where goroutines waited to run)")
	fs.StringVar(&c.selfTrace, "trace", "", "approval section: save the bench's own Go execution trace of the measured round trips (the requester's side) to this file")
	fs.StringVar(&c.upArgs, "up-args", "", "approval section: more arguments for heed up, space-separated")
	fs.IntVar(&c.escWindows, "esc-windows", 0, "escalation section: after the paced load, this many more paced windows (4 s at the same rate, each once the consumers caught up), printed one by one: whether a request costs the same as escalations and held requests accumulate")
	fs.StringVar(&c.tripsOut, "trips-out", "", "approval section: write every measured round trip to this file (CSV: when sent, and its hops in µs), to line slow ones up with heed up's GODEBUG=gctrace=1 or a trace; the escalation section writes its paced requests to FILE-escalation.csv")
	fs.StringVar(&c.approvalURL, "approval-url", "", "approval section: measure the heed already running at this NATS URL (e.g. the 3-node cluster of deploy/cluster/local.sh, every service its own process) instead of starting heed up; no RSS figures")
	fs.IntVar(&c.approvals, "approvals", 1000, "approval section: waiting runs opened, then answered by 50 callers")
	fs.IntVar(&c.roundTrips, "round-trips", 500, "approval section: single approvals measured one at a time")
	fs.IntVar(&c.pending, "pending", 10000, "approval and escalation sections: confirmations (requests) held pending for the RSS figure")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.warmSync = c.warmAsync / 10
	switch {
	case c.nAsync < 1 || c.nSync < 1:
		return c, errors.New("-n and -n-sync must be at least 1")
	case c.rounds < 1:
		return c, errors.New("-rounds must be at least 1")
	case c.slices < 1:
		return c, errors.New("-slices must be at least 1")
	case c.maxPending < 1:
		return c, errors.New("-max-pending must be at least 1")
	case c.approvals < 1 || c.roundTrips < 1 || c.pending < 1:
		return c, errors.New("-approvals, -round-trips and -pending must be at least 1")
	case c.warmAsync < 0:
		return c, errors.New("-warmup must not be negative")
	}
	return c, nil
}

func sectionNames() string {
	var names []string
	for _, s := range sections {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

func selectSections(only string) ([]section, error) {
	if strings.TrimSpace(only) == "" {
		return sections, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []section
	for _, s := range sections {
		if want[s.name] {
			out = append(out, s)
			delete(want, s.name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("-only: unknown section %q (have: %s)", n, sectionNames())
	}
	return out, nil
}

// benchEnv is what every section shares: one embedded server with heed's
// topology provisioned, and the codec every heed service uses.
type benchEnv struct {
	cfg   config
	srv   *embedded.Server
	codec *events.Codec
	log   io.Writer // progress, not results
}

// connect opens a new client connection; each case gets its own so that no
// state (pending acks, subscriptions) carries over between cases.
func (e *benchEnv) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(e.srv.URL(), nats.Name("heed-bench-"+name))
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return nc, nil
}

func (e *benchEnv) logf(format string, args ...any) {
	fmt.Fprintf(e.log, format+"\n", args...)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "heed-bench:", err)
		return 1
	}
	chosen, err := selectSections(cfg.only)
	if err != nil {
		fmt.Fprintln(stderr, "heed-bench:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	env, cleanup, err := newEnv(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "heed-bench:", err)
		return 1
	}
	defer cleanup()

	m := describeMachine()
	env.logf("heed-bench: %s", m.line())

	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "heed-bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "heed-bench: cpu profile:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	var results []*result
	for _, s := range chosen {
		env.logf("== %s (%s)", s.title, s.name)
		r, err := s.run(ctx, env)
		if err != nil {
			fmt.Fprintf(stderr, "heed-bench: section %s: %v\n", s.name, err)
			return 1
		}
		r.section = s
		results = append(results, r)
	}

	if cfg.memProfile != "" {
		if err := writeMemProfile(cfg.memProfile); err != nil {
			fmt.Fprintln(stderr, "heed-bench: mem profile:", err)
			return 1
		}
	}

	writeText(stdout, m, results)
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "Markdown (for BENCHMARKS.md):")
	fmt.Fprintln(stdout)
	writeMarkdown(stdout, m, cfg, results)

	for _, r := range results {
		if r.missed && cfg.failOnMiss {
			return 2
		}
	}
	return 0
}

// newEnv starts the embedded server in a fresh temporary directory and
// provisions heed's streams; cleanup stops the server and removes the data.
func newEnv(ctx context.Context, cfg config, stderr io.Writer) (*benchEnv, func(), error) {
	dir, err := os.MkdirTemp(cfg.dir, "heed-bench-*")
	if err != nil {
		return nil, nil, fmt.Errorf("data directory: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Listen: "127.0.0.1:-1", ServerName: "heed-bench", Logger: logger, SyncAlways: os.Getenv("HEED_BENCH_SYNC_ALWAYS") == "1"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	cleanup := func() {
		srv.Stop()
		os.RemoveAll(dir)
	}
	v, err := events.NewValidator()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	env := &benchEnv{cfg: cfg, srv: srv, codec: events.NewCodec(v), log: stderr}
	nc, err := env.connect("provision")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	defer nc.Close()
	bus, err := events.NewBus(nc, env.codec)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := events.Provision(pctx, bus.JetStream(), events.DefaultTopology()); err != nil {
		cleanup()
		return nil, nil, err
	}
	return env, cleanup, nil
}

func writeMemProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
