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
	f := Facts{Now: time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC), Cache: func(string, string, string) *readmodel.Decision { return nil }}
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

// TestDecideFromEveryPrefixDecidesTheSame: deciding again from any prefix
// of what a request's decision wrote (a crash, or a reader that read
// between two writes) gives the same events, content and all, not only
// the same ids (a route that decides by itself, read without its
// decision, once became a final-action deny with the approval's id).
func TestDecideFromEveryPrefixDecidesTheSame(t *testing.T) {
	rs, err := ParseRules("t", []byte(`risk_rules:
  - {name: edits, when: 'operation == "file_edit"', risk: 0.2, confidence: 0.8}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := Facts{Now: time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC), Cache: func(string, string, string) *readmodel.Decision { return nil }}
	for _, r := range []events.EscalationRequestedData{
		{Session: "s", Operation: "file_edit", Scope: "/tmp/x.txt", Requester: "s"},                                   // conditional approve
		{Session: "s", Operation: "tidy", Requester: "s", Risk: new(0.1), Confidence: new(0.9)},                       // auto approve
		{Session: "s", Operation: "deploy", Requester: "s", Risk: new(0.8)},                                           // offered
		{Session: "s", Operation: "force_push", Scope: "main", Requester: "s", Risk: new(0.95), Confidence: new(0.9)}, // critical
	} {
		all, err := Decide(rs, escalation.New("esc-p"), Cause{Request: &r}, f)
		if err != nil {
			t.Fatal(err)
		}
		for n := 1; n < len(all); n++ {
			st := escalation.New("esc-p")
			for i := range all[:n] {
				if err := escalation.Apply(st, &all[i], uint64(i+1)); err != nil {
					t.Fatal(err)
				}
			}
			rest, err := Decide(rs, st, Cause{Request: &r}, f)
			if err != nil {
				t.Fatal(err)
			}
			want := all[n:]
			if len(rest) != len(want) {
				t.Fatalf("%s after %d events: %d more, want %d", r.Operation, n, len(rest), len(want))
			}
			for i := range want {
				if rest[i].ID() != want[i].ID() || string(rest[i].Data()) != string(want[i].Data()) {
					t.Errorf("%s after %d events: %s %s, want %s %s", r.Operation, n, rest[i].ID(), rest[i].Data(), want[i].ID(), want[i].Data())
				}
			}
		}
	}
}
