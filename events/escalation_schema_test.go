package events_test

import (
	"strings"
	"testing"

	"github.com/heedhq/heed/events"
)

// TestEscalationSchemasRejectBadInstances: the escalation events and the
// request command refuse what their documented shape does not allow (the
// catalog-wide test only tries a string and an unknown field).
func TestEscalationSchemasRejectBadInstances(t *testing.T) {
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	good := `{"session":"agent/s1","operation":"deploy","scope":"stage","risk":0.5,"confidence":0.9,"requester":"agent/s1"}`
	if err := v.Validate(events.EscalationRequested, []byte(good)); err != nil {
		t.Fatalf("a good request: %v", err)
	}
	if err := v.ValidateCommand("heed.cmd.escalation.request", []byte(good)); err != nil {
		t.Fatalf("a good request command: %v", err)
	}
	for typ, body := range map[events.Type]string{
		events.EscalationDecided: `{"decision":"approved","method":"user","by":"alice","held_ms":1,"operation":"deploy","scope":"service:api","environment":"prod"}`,
		events.EscalationOutcome: `{"outcome":"success","by":"agent","operation":"deploy","scope":"service:api","environment":"prod","decision":"approved"}`,
	} {
		if err := v.Validate(typ, []byte(body)); err != nil {
			t.Fatalf("a good %s with an environment: %v", typ, err)
		}
	}
	for name, c := range map[string]struct {
		t    events.Type
		body string
	}{
		"request without session":           {events.EscalationRequested, `{"operation":"deploy","requester":"x"}`},
		"request without operation":         {events.EscalationRequested, `{"session":"s","requester":"x"}`},
		"risk above 1":                      {events.EscalationRequested, `{"session":"s","operation":"o","requester":"x","risk":1.5}`},
		"negative confidence":               {events.EscalationRequested, `{"session":"s","operation":"o","requester":"x","confidence":-0.1}`},
		"quorum of 1":                       {events.EscalationRequested, `{"session":"s","operation":"o","requester":"x","quorum":{"required":1}}`},
		"unknown route":                     {events.EscalationRouted, `{"decision":"maybe","risk":0.5,"risk_source":"request","confidence":0.5,"reason":"r","priority":8}`},
		"unknown decision":                  {events.EscalationDecided, `{"decision":"perhaps","method":"user","by":"alice","held_ms":1,"operation":"o"}`},
		"unknown escalation reason":         {events.EscalationEscalated, `{"from_tier":"tier1","to_tier":"tier2","escalation_count":1,"reason":"bored"}`},
		"unknown outcome":                   {events.EscalationOutcome, `{"outcome":"meh","by":"agent","operation":"o","decision":"approved"}`},
		"decided, environment not a string": {events.EscalationDecided, `{"decision":"approved","method":"user","by":"alice","held_ms":1,"operation":"o","environment":7}`},
		"decided, environment too long":     {events.EscalationDecided, `{"decision":"approved","method":"user","by":"alice","held_ms":1,"operation":"o","environment":"` + strings.Repeat("e", 101) + `"}`},
		"outcome, environment not a string": {events.EscalationOutcome, `{"outcome":"success","by":"agent","operation":"o","decision":"approved","environment":["prod"]}`},
	} {
		if err := v.Validate(c.t, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted %s", name, c.body)
		}
	}
	for name, body := range map[string]string{
		"command without operation": `{"session":"s"}`,
		"command risk above 1":      `{"session":"s","operation":"o","risk":2}`,
		"command bad id":            `{"id":"has space","session":"s","operation":"o"}`,
	} {
		if err := v.ValidateCommand("heed.cmd.escalation.request", []byte(body)); err == nil {
			t.Errorf("%s: accepted %s", name, body)
		}
	}
}
