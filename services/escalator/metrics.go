package escalator

import (
	"github.com/heedhq/heed/lib/service"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the escalator's own families (docs/OPERATIONS.md, Metrics).
type metrics struct {
	routed    *prometheus.CounterVec
	decided   *prometheus.CounterVec
	offers    prometheus.Counter
	escalated *prometheus.CounterVec
	held      prometheus.Gauge
	decideLat prometheus.Histogram
}

func newMetrics(m *service.Metrics) *metrics {
	out := &metrics{
		routed:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heed_escalations_routed_total", Help: "Escalation requests routed, by routing decision."}, []string{"decision"}),
		decided:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heed_escalations_decided_total", Help: "Escalations decided, by decision and method."}, []string{"decision", "method"}),
		offers:    prometheus.NewCounter(prometheus.CounterOpts{Name: "heed_escalation_offers_total", Help: "Escalations offered to a tier."}),
		escalated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "heed_escalations_escalated_total", Help: "Escalations moved past a tier, by reason (timeout, unreachable, passed)."}, []string{"reason"}),
		held:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "heed_escalations_held", Help: "Escalation requests held (in the escalator's memory)."}),
		decideLat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "heed_escalation_decide_seconds", Help: "Time to decide one escalation step (routing included), without reading or writing the log or asking who is present.",
			Buckets: []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01}}),
	}
	if m != nil {
		r := prometheus.WrapRegistererWith(prometheus.Labels{"service": "escalator"}, m.Registry)
		r.MustRegister(out.routed, out.decided, out.offers, out.escalated, out.held, out.decideLat)
	}
	return out
}
