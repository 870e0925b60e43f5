// Command heed-loadgen runs N skill runs against simulated tools whose
// failures recur with a known distribution (some heal with the generic
// patterns, some only with a fix the simulated agent teaches the first
// time), with every heed service running, and reports how much healing
// needed nobody once each failure had been taught, as a curve over time.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/heedhq/heed/lib/embedded"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/tools/internal/sim"
)

func main() {
	var cfg sim.Config
	var asJSON bool
	flag.IntVar(&cfg.Runs, "runs", 1000, "runs to start")
	flag.IntVar(&cfg.Concurrency, "concurrency", 50, "runs in flight at once")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the failure distribution")
	flag.BoolVar(&cfg.Replay, "replay", true, "check every projection against the log at the end (heed replay)")
	flag.StringVar(&cfg.URL, "nats-url", "", "use this NATS instead of an embedded server in a temporary directory")
	flag.BoolVar(&asJSON, "json", false, "print the report as JSON")
	listen := flag.String("nats-listen", "127.0.0.1:-1", "address of the embedded server (to watch it with the nats CLI or heed)")
	logLevel := flag.String("log-level", "", "log the services at this level to stderr (debug, info, warn)")
	flag.Parse()
	if *logLevel != "" {
		cfg.Logger = service.NewLogger(os.Stderr, *logLevel)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if cfg.URL == "" {
		dir, err := os.MkdirTemp("", "heed-loadgen-*")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		srv, err := embedded.Start(embedded.Config{DataDir: dir, Listen: *listen})
		if err != nil {
			fail(err)
		}
		defer srv.Stop()
		cfg.URL = srv.URL()
	}
	rep, err := sim.Run(ctx, cfg)
	if err != nil {
		fail(err)
	}
	if asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Println(string(b))
		return
	}
	Print(os.Stdout, rep)
	if rep.ReplayIdentical != nil && !*rep.ReplayIdentical {
		os.Exit(1)
	}
}

// Print writes the report as Markdown.
func Print(w io.Writer, rep *sim.Report) {
	sim.Print(w, rep)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "heed-loadgen:", err)
	os.Exit(1)
}
