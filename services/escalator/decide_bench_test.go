package escalator

import (
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/escalation"
)

// BenchmarkDecideRequest: the routing decision of a new request inside the
// service (risk rules, cache, auto-approve rules, matrix, the offer and
// its confirmation), without the log. The issue asks p99 ≤ 1 ms.
func BenchmarkDecideRequest(b *testing.B) {
	rs, err := ParseRules("bench", []byte(`risk_rules:
  - {name: force_push, when: 'operation == "force_push"', risk: 0.95}
  - {name: deploys, when: 'operation == "deploy" && environment == "prod"', risk: 0.8}
quorum:
  - {name: critical_two, when: critical, required: 2, veto: true}
`))
	if err != nil {
		b.Fatal(err)
	}
	f := Facts{Now: time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC), Cache: func(string, string) *readmodel.Decision { return nil }}
	reqs := []events.EscalationRequestedData{
		{Session: "s", Operation: "force_push", Scope: "main", Requester: "s"},
		{Session: "s", Operation: "deploy", Environment: "prod", Requester: "s"},
		{Session: "s", Operation: "file_edit", Scope: "/tmp/x", Requester: "s", Risk: new(0.1), Confidence: new(0.9)},
		{Session: "s", Operation: "refactor", Requester: "s"},
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := reqs[i%len(reqs)]
		if _, err := Decide(rs, escalation.New("esc-bench"), Cause{Request: &r}, f); err != nil {
			b.Fatal(err)
		}
	}
}
