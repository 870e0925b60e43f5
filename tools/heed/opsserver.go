package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// The long-running client programs — the bridges (heed desktop, heed chat),
// the console and the MCP server — are processes an operator supervises
// like the services: --metrics-listen ADDR serves GET /healthz (200 while
// connected to NATS, 503 with the reason while not) and GET /metrics (the
// process, the Go runtime and the NATS connection) for a probe and for
// Prometheus. The services' own mains serve theirs with the same flag.

// addMetricsFlag adds --metrics-listen to a long-running client program.
func addMetricsFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "metrics-listen", "", "serve GET /healthz (NATS connected) and GET /metrics (Prometheus) on this host:port, for probes and scraping")
	_ = cmd.RegisterFlagCompletionFunc("metrics-listen", cobra.NoFileCompletions)
}

// serveOps serves /healthz and /metrics of program on addr until ctx ends
// (nothing when addr is empty). It returns the address it listens on.
func serveOps(ctx context.Context, w io.Writer, addr, program string, nc *nats.Conn, log *slog.Logger) (string, error) {
	if addr == "" {
		return "", nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", badInput("--metrics-listen %s: %v", addr, err)
	}
	reg := service.ProcessCollectors()
	labels := prometheus.Labels{"program": program}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "heed_client_nats_connected", Help: "1 while the program is connected to NATS.", ConstLabels: labels}, func() float64 {
			if nc.IsConnected() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "heed_client_nats_reconnects_total", Help: "Times the program reconnected to NATS.", ConstLabels: labels}, func() float64 {
			return float64(nc.Stats().Reconnects)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "heed_client_nats_in_msgs_total", Help: "Messages the program received from NATS.", ConstLabels: labels}, func() float64 {
			return float64(nc.Stats().InMsgs)
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "heed_client_nats_out_msgs_total", Help: "Messages the program sent to NATS.", ConstLabels: labels}, func() float64 {
			return float64(nc.Stats().OutMsgs)
		}),
	)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", service.MetricsHandler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		h := struct {
			Status  string `json:"status"`
			Program string `json:"program"`
			NATS    string `json:"nats"`
			Server  string `json:"server,omitempty"`
			Reason  string `json:"reason,omitempty"`
		}{Status: "ok", Program: program, NATS: nc.Status().String(), Server: nc.ConnectedUrlRedacted()}
		if !nc.IsConnected() {
			h.Status, h.Reason = "degraded", fmt.Sprintf("not connected to NATS (%s)", nc.Status())
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics endpoint stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(w, "heed %s: health and metrics on http://%s (/healthz, /metrics)\n", program, ln.Addr())
	return ln.Addr().String(), nil
}
