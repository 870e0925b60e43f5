package service

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are one service's Prometheus metrics, in a registry of its own
// (no global registry: `heed up` runs several services in one process and
// gathers them all; every series carries service="<name>"). The families
// are documented in docs/OPERATIONS.md, "Metrics".
type Metrics struct {
	Registry *prometheus.Registry

	published    *prometheus.CounterVec
	consumed     *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
	lag          *prometheus.GaugeVec
	consumerUp   *prometheus.GaugeVec
	recreated    *prometheus.CounterVec
	healthy      prometheus.Gauge
	confirmPend  *prometheus.GaugeVec
	deadlines    *prometheus.CounterVec
	answerLat    *prometheus.HistogramVec
	stepLat      *prometheus.HistogramVec
	runs         *prometheus.GaugeVec
	confirmState *prometheus.GaugeVec

	// Children are looked up once per label set: the hot path is a read
	// lock and a map hit, no allocation.
	mu   sync.RWMutex
	pubs map[string]prometheus.Counter
	cons map[consumedKey]prometheus.Counter
}

type consumedKey struct {
	consumer, typ string
	outcome       events.Outcome
}

// Latency buckets: from a millisecond (an approval answered by a rule) to
// an hour (a person, a long tool).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// NewMetrics returns the metrics of the service name in a fresh registry.
func NewMetrics(name string) *Metrics {
	reg := prometheus.NewRegistry()
	r := prometheus.WrapRegistererWith(prometheus.Labels{"service": name}, reg)
	f := newFactory(r)
	m := &Metrics{
		Registry:     reg,
		published:    f.counter("heed_events_published_total", "Events this service wrote to the log (acknowledged by the stream), by type.", "type"),
		consumed:     f.counter("heed_events_consumed_total", "Deliveries this service's consumers finished, by consumer, event type and outcome (acked, dead_lettered, retried).", "consumer", "type", "outcome"),
		deadLetters:  f.counter("heed_dead_letters_total", "Messages this service's consumers sent to HEED_DLQ, by consumer and code.", "consumer", "code"),
		lag:          f.gauge("heed_consumer_lag", "Events a durable consumer has not finished: not yet delivered plus delivered and not acknowledged (polled).", "consumer"),
		consumerUp:   f.gauge("heed_consumer_up", "1 while the durable consumer exists on the server, 0 while it is gone (it is recreated).", "consumer"),
		recreated:    f.counter("heed_consumer_recreated_total", "Times a durable consumer was found gone and recreated.", "consumer"),
		confirmPend:  f.gauge("heed_confirmations_pending", "Confirmations requested and not yet answered or expired (from the index)."),
		deadlines:    f.counter("heed_deadlines_fired_total", "Confirmation deadlines the server fired and the router handled, by outcome (expired: the confirmation expired; moot: it was already answered).", "outcome"),
		answerLat:    f.histogram("heed_answer_latency_seconds", "Time from a confirmation's request to the answer that took effect (event times), by answer method.", "method"),
		stepLat:      f.histogram("heed_step_latency_seconds", "Time from a step's start to its result (the tool call), by tool and outcome (completed, failed).", "tool", "outcome"),
		runs:         f.gauge("heed_runs", "Runs by state (from the index; counted from the index at start).", "state"),
		confirmState: f.gauge("heed_confirmations", "Confirmations by state (from the index).", "state"),
		pubs:         map[string]prometheus.Counter{},
		cons:         map[consumedKey]prometheus.Counter{},
	}
	hg := prometheus.NewGauge(prometheus.GaugeOpts{Name: "heed_service_healthy", Help: "1 when the service's health is ok, 0 when degraded."})
	r.MustRegister(hg)
	m.healthy = hg
	return m
}

type factory struct{ r prometheus.Registerer }

func newFactory(r prometheus.Registerer) factory { return factory{r} }

func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.r.MustRegister(v)
	return v
}

func (f factory) gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.r.MustRegister(v)
	return v
}

func (f factory) histogram(name, help string, labels ...string) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, labels)
	f.r.MustRegister(v)
	return v
}

// Published implements events.Observer.
func (m *Metrics) Published(typ string) {
	m.mu.RLock()
	c, ok := m.pubs[typ]
	m.mu.RUnlock()
	if !ok {
		c = m.published.WithLabelValues(typ)
		m.mu.Lock()
		m.pubs[typ] = c
		m.mu.Unlock()
	}
	c.Inc()
}

// Consumed implements events.Observer.
func (m *Metrics) Consumed(consumer, typ string, outcome events.Outcome) {
	k := consumedKey{consumer, typ, outcome}
	m.mu.RLock()
	c, ok := m.cons[k]
	m.mu.RUnlock()
	if !ok {
		t := typ
		if t == "" {
			t = "invalid"
		}
		c = m.consumed.WithLabelValues(consumer, t, string(outcome))
		m.mu.Lock()
		m.cons[k] = c
		m.mu.Unlock()
	}
	c.Inc()
}

// DeadLettered implements events.Observer.
func (m *Metrics) DeadLettered(consumer string, code events.Code) {
	m.deadLetters.WithLabelValues(consumer, string(code)).Inc()
}

// DeadlineFired counts a fired deadline: expired (it took effect) or moot.
func (m *Metrics) DeadlineFired(expired bool) {
	if m == nil {
		return
	}
	o := "moot"
	if expired {
		o = "expired"
	}
	m.deadlines.WithLabelValues(o).Inc()
}

// AnswerLatency records the time from a request to the answer that took
// effect.
func (m *Metrics) AnswerLatency(method string, d time.Duration) {
	if m == nil {
		return
	}
	m.answerLat.WithLabelValues(method).Observe(max(d, 0).Seconds())
}

// StepLatency records a tool call's time, by tool and outcome.
func (m *Metrics) StepLatency(tool, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.stepLat.WithLabelValues(tool, outcome).Observe(max(d, 0).Seconds())
}

// AddRuns moves n runs into state (n < 0: out of it).
func (m *Metrics) AddRuns(state string, n float64) {
	if m == nil || state == "" {
		return
	}
	m.runs.WithLabelValues(state).Add(n)
}

// AddConfirmations moves n confirmations into state; the pending gauge
// follows the open states (pending, delegated).
func (m *Metrics) AddConfirmations(state string, n float64) {
	if m == nil || state == "" {
		return
	}
	m.confirmState.WithLabelValues(state).Add(n)
	if state == "pending" || state == "delegated" {
		m.confirmPend.WithLabelValues().Add(n)
	}
}

// ProcessCollectors returns a registry with the process and Go runtime
// collectors, gathered once per process next to the services' registries.
func ProcessCollectors() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return reg
}

// MetricsHandler serves the gathered metrics in the Prometheus format.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ListenMetrics listens on addr and serves GET /metrics from g until ctx
// is done. It returns the address it listens on (addr may have port 0).
func ListenMetrics(ctx context.Context, addr string, g prometheus.Gatherer, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(g))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "err", err)
		}
	}()
	return ln.Addr().String(), nil
}
