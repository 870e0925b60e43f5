package confirm

import (
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// TestDecideRouteLayers: each layer of the router's decision, with no
// server: what answers a request, or when people's deadline falls.
func TestDecideRouteLayers(t *testing.T) {
	rules, err := ParseRules("rules.yaml", []byte(`
rules:
  - {name: stage proceeds, when: 'inputs.environment == "stage"', answer: proceed}
  - {name: qa says maybe, when: 'inputs.environment == "qa"', answer: maybe}
  - {name: prod asks, when: 'inputs.environment == "production"', ask: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Rules: rules}
	cfg.defaults()
	requested := time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)
	now := requested.Add(time.Second)
	opts := []events.Option{{Label: "Go", Value: "proceed"}, {Label: "Stop", Value: "cancel"}}
	req := func(env string, mod func(*events.ConfirmRequestedData)) *events.ConfirmRequestedData {
		r := &events.ConfirmRequestedData{Message: "go?", Options: opts, Default: "cancel", Skill: "deploy", Step: "confirm", RunID: "r1",
			Context: map[string]any{"inputs": map[string]any{"environment": env}}, TimeoutS: 60}
		if mod != nil {
			mod(r)
		}
		return r
	}
	remembered := func(*events.ConfirmRequestedData) (readmodel.Pref, bool) {
		return readmodel.Pref{ID: "pref-1", Choice: "proceed", By: "user:alice", LearnedFrom: "c0/answer/1"}, true
	}
	for _, tc := range []struct {
		name      string
		req       *events.ConfirmRequestedData
		method    string // "" : people
		choice    string
		delegated bool
		warning   string
	}{
		{"invalid request: the safest choice at once", req("dev", func(r *events.ConfirmRequestedData) { r.Default = "nope" }), events.MethodError, "cancel", false, ""},
		{"--yes overrides everything", req("production", func(r *events.ConfirmRequestedData) { r.Yes = true }), events.MethodOverride, "proceed", false, ""},
		{"a rule answers", req("stage", nil), events.MethodMemory, "proceed", false, ""},
		{"a rule whose answer is not an option asks people", req("qa", nil), "", "", false, "not an option"},
		{"a remembered choice answers", req("dev", func(r *events.ConfirmRequestedData) { r.LearnPreference = true }), events.MethodMemory, "proceed", false, ""},
		{"an ask rule beats the remembered choice", req("production", func(r *events.ConfirmRequestedData) { r.LearnPreference = true }), "", "", false, ""},
		{"ai_assist hands it to the agent before people", req("dev", func(r *events.ConfirmRequestedData) { r.AIAssist, r.Agent = true, "agent:claude" }), "", "", true, ""},
		{"otherwise people", req("dev", nil), "", "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec, err := decideRoute(cfg, "c1", tc.req, requested, now, remembered)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.method != "":
				if dec.Answer == nil || dec.Answer.Method != tc.method || dec.Answer.Choice != tc.choice {
					t.Errorf("answer = %+v, want %s %q", dec.Answer, tc.method, tc.choice)
				}
			default:
				if dec.Answer != nil {
					t.Errorf("answered %+v, want people asked", dec.Answer)
				}
				if want := requested.Add(time.Minute); !dec.Deadline.Equal(want) {
					t.Errorf("deadline %s, want %s (the request's time + its timeout)", dec.Deadline, want)
				}
			}
			if got := len(dec.Then) == 1 && events.Type(dec.Then[0].Type()) == events.ConfirmDelegated; got != tc.delegated {
				t.Errorf("delegated = %v, want %v", got, tc.delegated)
			}
			if tc.warning != "" && (len(dec.Warnings) != 1 || !strings.Contains(dec.Warnings[0], tc.warning)) {
				t.Errorf("warnings = %v, want one about %q", dec.Warnings, tc.warning)
			}
		})
	}
}
