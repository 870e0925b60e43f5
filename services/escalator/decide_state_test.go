package escalator

import (
	"reflect"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/escalation"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The state decide returns with its events is the state a read of the log
// folds from those events (the command replies and holds from it without
// decoding the events again), and the metrics counted from it carry the
// events' labels.
func TestDecidedStateIsTheLogsFold(t *testing.T) {
	rs, err := ParseRules("t", []byte(`tiers:
  - {name: t1, timeout: 1m, members: [{id: "user:a"}]}
  - {name: t2, timeout: 1m, members: [{id: "user:b"}]}
  - {name: t3, timeout: 1m}
learning_tier: t1
auto_approve:
  - {name: tmp, when: 'operation == "file_edit" && scope startsWith "/tmp/"', safeguards: [monitor]}
routing:
  - {name: high, when: "risk > 0.7", tier: t1, priority: 9}
  - {name: low, decision: auto_approve}
`))
	if err != nil {
		t.Fatal(err)
	}
	nobody := func(string, []string) (bool, []string) { return false, nil }
	f := Facts{Now: time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC), Reachable: nobody, Cache: func(string, string, string) *readmodel.Decision { return nil }}
	e := &escalator{m: newMetrics(nil)}
	for _, r := range []events.EscalationRequestedData{
		{Session: "s", Operation: "file_edit", Scope: "/tmp/x", Requester: "s", Risk: new(0.1), Confidence: new(0.9)}, // conditional approve
		{Session: "s", Operation: "tidy", Requester: "s", Risk: new(0.1)},                                             // auto approve
		{Session: "s", Operation: "deploy", Requester: "s", Risk: new(0.8)},                                           // t1, t2 unreachable: offered to t3
	} {
		evs, next, err := decide(rs, escalation.New("esc-s"), Cause{Request: &r}, f)
		if err != nil {
			t.Fatal(err)
		}
		folded := escalation.New("esc-s")
		for i := range evs {
			if err := escalation.Apply(folded, &evs[i], 0); err != nil {
				t.Fatal(err)
			}
			if events.Type(evs[i].Type()).Kind() == "escalation" {
				e.count(&evs[i], next)
			}
		}
		if !reflect.DeepEqual(next, folded) {
			t.Errorf("%s: decided state\n%+v\nthe log's fold\n%+v", r.Operation, next, folded)
		}
	}
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"routed conditional_approve", testutil.ToFloat64(e.m.routed.WithLabelValues(events.RouteConditionalApprove)), 1},
		{"routed auto_approve", testutil.ToFloat64(e.m.routed.WithLabelValues(events.RouteAutoApprove)), 1},
		{"routed escalate", testutil.ToFloat64(e.m.routed.WithLabelValues(events.RouteEscalate)), 1},
		{"decided approved by rule", testutil.ToFloat64(e.m.decided.WithLabelValues(events.EscalationApproved, events.EscMethodRule)), 2},
		{"escalated unreachable", testutil.ToFloat64(e.m.escalated.WithLabelValues(events.EscalateUnreachable)), 2},
		{"offers", testutil.ToFloat64(e.m.offers), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
}
