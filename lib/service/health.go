package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go/jetstream"
)

// HealthConfig says when a service is degraded. docs/OPERATIONS.md,
// "Health".
type HealthConfig struct {
	// PollEvery is how often every durable consumer's state is read from
	// the server (lag, existence). Default 2s.
	PollEvery time.Duration
	// LagThreshold: a consumer with more events than this not finished
	// (pending + unacknowledged) is degraded. Default 10,000.
	LagThreshold uint64
	// StallAfter: a consumer with events waiting whose delivered position
	// has not moved for this long is degraded (stopped). Default 60s.
	StallAfter time.Duration
	// RecoveredHold: a consumer that was found gone and recreated stays
	// degraded this long afterwards, so that a health check polled every
	// few seconds sees the incident. Default 10s.
	RecoveredHold time.Duration
}

func (c *HealthConfig) defaults() {
	if c.PollEvery <= 0 {
		c.PollEvery = 2 * time.Second
	}
	if c.LagThreshold == 0 {
		c.LagThreshold = 10000
	}
	if c.StallAfter <= 0 {
		c.StallAfter = 60 * time.Second
	}
	if c.RecoveredHold <= 0 {
		c.RecoveredHold = 10 * time.Second
	}
}

// ConsumerHealth is one durable consumer's state in a health report.
type ConsumerHealth struct {
	Stream     string    `json:"stream"`
	Lag        uint64    `json:"lag"` // pending + unacknowledged
	Pending    uint64    `json:"pending"`
	AckPending int       `json:"ack_pending"`
	AckFloor   uint64    `json:"ack_floor"`
	Delivered  uint64    `json:"delivered"`
	Polled     time.Time `json:"polled,omitzero"`
	Problem    string    `json:"problem,omitempty"`
}

// watched is a durable consumer the runtime polls: one of events.Consume
// (recreated by itself when lost) or one named by WatchDurable.
type watched struct {
	stream, name string
	c            *events.Consumer // nil for WatchDurable

	info        *jetstream.ConsumerInfo
	pollErr     error
	polled      time.Time
	delivered   uint64
	movedAt     time.Time
	lostErr     error
	recreatedAt time.Time
	from        uint64
}

// WatchDurable adds a durable consumer that is not an events.Consume (a
// raw JetStream consumer) to the runtime's lag metrics and health.
func (r *Runtime) WatchDurable(stream, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watch[stream+"/"+name] = &watched{stream: stream, name: name}
}

// SetHealthConfig replaces the health thresholds (before or while running).
func (r *Runtime) SetHealthConfig(c HealthConfig) {
	c.defaults()
	r.mu.Lock()
	r.hcfg = c
	r.mu.Unlock()
}

// observer is what the runtime installs on its bus: the metrics and the
// consumers' lifecycle for health.
type observer struct {
	*Metrics
	rt *Runtime
}

func (o observer) ConsumerStarted(c *events.Consumer) {
	o.rt.mu.Lock()
	o.rt.watch[c.Stream()+"/"+c.Name()] = &watched{stream: c.Stream(), name: c.Name(), c: c, movedAt: time.Now()}
	o.rt.mu.Unlock()
	o.consumerUp.WithLabelValues(c.Name()).Set(1)
}

func (o observer) ConsumerStopped(c *events.Consumer) {
	o.rt.mu.Lock()
	if w := o.rt.watch[c.Stream()+"/"+c.Name()]; w != nil && w.c == c {
		delete(o.rt.watch, c.Stream()+"/"+c.Name())
	}
	o.rt.mu.Unlock()
}

func (o observer) ConsumerLost(c *events.Consumer, err error) {
	o.rt.mu.Lock()
	if w := o.rt.watch[c.Stream()+"/"+c.Name()]; w != nil {
		w.lostErr = err
	}
	o.rt.mu.Unlock()
	o.consumerUp.WithLabelValues(c.Name()).Set(0)
	o.rt.Log.Warn("durable consumer lost", "consumer", c.Name(), "err", err)
}

func (o observer) ConsumerRecreated(c *events.Consumer, from uint64) {
	o.rt.mu.Lock()
	if w := o.rt.watch[c.Stream()+"/"+c.Name()]; w != nil {
		w.lostErr, w.recreatedAt, w.from = nil, time.Now(), from
	}
	o.rt.mu.Unlock()
	o.consumerUp.WithLabelValues(c.Name()).Set(1)
	o.recreated.WithLabelValues(c.Name()).Inc()
}

// pollLoop reads every watched consumer's state until the runtime closes.
func (r *Runtime) pollLoop() {
	for {
		r.mu.Lock()
		every := r.hcfg.PollEvery
		r.mu.Unlock()
		select {
		case <-r.done:
			return
		case <-time.After(every):
		}
		r.PollConsumers(context.Background())
	}
}

// PollConsumers reads every watched consumer's state now (lag metrics,
// health). The runtime does it every HealthConfig.PollEvery.
func (r *Runtime) PollConsumers(ctx context.Context) {
	r.mu.Lock()
	ws := make([]*watched, 0, len(r.watch))
	for _, w := range r.watch {
		ws = append(ws, w)
	}
	r.mu.Unlock()
	for _, w := range ws {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var info *jetstream.ConsumerInfo
		var err error
		if w.c != nil {
			info, err = w.c.Info(ctx) // a durable found gone is recreated by its consumer
		} else {
			var cons jetstream.Consumer
			if cons, err = r.Bus.JetStream().Consumer(ctx, w.stream, w.name); err == nil {
				info = cons.CachedInfo()
			}
		}
		cancel()
		now := time.Now()
		r.mu.Lock()
		w.polled, w.pollErr = now, err
		if err == nil {
			w.info = info
			if info.Delivered.Stream != w.delivered || w.movedAt.IsZero() {
				w.delivered, w.movedAt = info.Delivered.Stream, now
			}
			lag := info.NumPending + uint64(info.NumAckPending)
			r.Metrics.lag.WithLabelValues(w.name).Set(float64(lag))
			if w.c == nil {
				r.Metrics.consumerUp.WithLabelValues(w.name).Set(1)
			}
		} else if errors.Is(err, jetstream.ErrConsumerNotFound) {
			r.Metrics.consumerUp.WithLabelValues(w.name).Set(0)
		}
		r.mu.Unlock()
	}
	h := r.Health()
	if h.Status == "ok" {
		r.Metrics.healthy.Set(1)
	} else {
		r.Metrics.healthy.Set(0)
	}
}

// consumerHealth judges the watched consumers (r.mu held) and returns
// their states and the reasons the service is degraded.
func (r *Runtime) consumerHealth(now time.Time) (map[string]ConsumerHealth, []string) {
	out := make(map[string]ConsumerHealth, len(r.watch))
	var reasons []string
	cfg := r.hcfg
	for _, w := range r.watch {
		ch := ConsumerHealth{Stream: w.stream, Polled: w.polled}
		if w.info != nil {
			ch.Pending, ch.AckPending, ch.AckFloor, ch.Delivered = w.info.NumPending, w.info.NumAckPending, w.info.AckFloor.Stream, w.info.Delivered.Stream
			ch.Lag = ch.Pending + uint64(ch.AckPending)
		}
		lost := w.lostErr
		if w.c != nil && lost == nil {
			lost = w.c.Lost()
		}
		switch {
		case lost != nil:
			ch.Problem = fmt.Sprintf("durable consumer %s is gone (%v); recreating it", w.name, lost)
		case errors.Is(w.pollErr, jetstream.ErrConsumerNotFound):
			ch.Problem = fmt.Sprintf("durable consumer %s is gone", w.name)
			if w.c != nil {
				ch.Problem += "; recreating it"
			}
		case !w.recreatedAt.IsZero() && now.Sub(w.recreatedAt) < cfg.RecoveredHold:
			ch.Problem = fmt.Sprintf("durable consumer %s was gone and was recreated at %s, from sequence %d", w.name, w.recreatedAt.UTC().Format(time.RFC3339), w.from)
		case w.info != nil && ch.Lag > cfg.LagThreshold:
			ch.Problem = fmt.Sprintf("consumer %s lags %d events (threshold %d)", w.name, ch.Lag, cfg.LagThreshold)
		case w.info != nil && w.info.NumPending > 0 && now.Sub(w.movedAt) > cfg.StallAfter:
			ch.Problem = fmt.Sprintf("consumer %s has taken no event for %s while %d wait: stopped", w.name, now.Sub(w.movedAt).Round(time.Second), w.info.NumPending)
		case w.pollErr != nil && now.Sub(w.polled) < 3*cfg.PollEvery && w.info == nil:
			ch.Problem = fmt.Sprintf("consumer %s: %v", w.name, w.pollErr)
		}
		if ch.Problem != "" {
			reasons = append(reasons, ch.Problem)
		}
		out[w.name] = ch
	}
	sort.Strings(reasons)
	return out, reasons
}
