package events_test

import (
	"testing"

	"github.com/heedhq/heed/events"
)

// TestChangeSetSchemasRejectBadInstances: the change-set events and
// commands refuse what their documented shape does not allow (the
// catalog-wide test only tries a string and an unknown field).
func TestChangeSetSchemasRejectBadInstances(t *testing.T) {
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	item := `{"item":1,"tool":"set_task_title","args":{"title":"x"},"summary":"Set title"}`
	good := `{"agent":"agent:a","subject":"task-1","items":[` + item + `],"expires_at":"2026-12-01T00:00:00Z","proposed_by":"agent:a"}`
	if err := v.Validate(events.ChangeSetProposed, []byte(good)); err != nil {
		t.Fatalf("a good proposal: %v", err)
	}
	eleven := "[" + item
	for range 10 {
		eleven += "," + item
	}
	eleven += "]"
	for name, c := range map[string]struct {
		t    events.Type
		body string
	}{
		"proposal without items":     {events.ChangeSetProposed, `{"agent":"a","subject":"s","items":[],"expires_at":"2026-12-01T00:00:00Z","proposed_by":"a"}`},
		"proposal of 11 items":       {events.ChangeSetProposed, `{"agent":"a","subject":"s","items":` + eleven + `,"expires_at":"2026-12-01T00:00:00Z","proposed_by":"a"}`},
		"item without a summary":     {events.ChangeSetProposed, `{"agent":"a","subject":"s","items":[{"item":1,"tool":"t","args":{}}],"expires_at":"2026-12-01T00:00:00Z","proposed_by":"a"}`},
		"item 0":                     {events.ChangeSetProposed, `{"agent":"a","subject":"s","items":[{"item":0,"tool":"t","args":{},"summary":"s"}],"expires_at":"2026-12-01T00:00:00Z","proposed_by":"a"}`},
		"proposal without an agent":  {events.ChangeSetProposed, `{"subject":"s","items":[` + item + `],"expires_at":"2026-12-01T00:00:00Z","proposed_by":"a"}`},
		"unknown verdict":            {events.ChangeSetDecided, `{"decisions":[{"item":1,"verdict":"maybe"}],"by":"alice"}`},
		"decision without decisions": {events.ChangeSetDecided, `{"decisions":[],"by":"alice"}`},
		"decision without by":        {events.ChangeSetDecided, `{"decisions":[{"item":1,"verdict":"confirmed"}]}`},
		"unknown refusal code":       {events.ChangeSetRefused, `{"decision_id":"d","decision_seq":1,"by":"b","refused":[{"item":1,"verdict":"confirmed","code":"bored","reason":"r"}]}`},
		"apply without a key":        {events.ChangeApplyStarted, `{"item":1,"tool":"t","attempt":1}`},
		"attempt 0":                  {events.ChangeApplyCompleted, `{"item":1,"attempt":0,"duration_ms":1}`},
		"failure without an error":   {events.ChangeApplyFailed, `{"item":1,"attempt":1,"duration_ms":1}`},
		"expiry without items":       {events.ChangeSetExpired, `{"expires_at":"2026-12-01T00:00:00Z"}`},
	} {
		if err := v.Validate(c.t, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted %s", name, c.body)
		}
	}
	for name, c := range map[string]struct{ subject, body string }{
		"propose without calls":       {"heed.cmd.changeset.propose", `{"agent":"a","subject":"s","calls":[]}`},
		"propose a call without tool": {"heed.cmd.changeset.propose", `{"agent":"a","subject":"s","calls":[{"args":{}}]}`},
		"propose a bad id":            {"heed.cmd.changeset.propose", `{"id":"has space","agent":"a","subject":"s","calls":[{"tool":"t"}]}`},
		"decide an unknown verdict":   {"heed.cmd.changeset.decide", `{"id":"cs-1","items":[1],"verdict":"maybe","by":"b"}`},
		"decide item 0":               {"heed.cmd.changeset.decide", `{"id":"cs-1","items":[0],"verdict":"confirmed","by":"b"}`},
		"decide without by":           {"heed.cmd.changeset.decide", `{"id":"cs-1","items":[1],"verdict":"confirmed"}`},
		"history without an agent":    {"heed.cmd.changeset.history", `{"subject":"s"}`},
		"history of 1,000":            {"heed.cmd.changeset.history", `{"agent":"a","limit":1000}`},
		"list 0":                      {"heed.cmd.changeset.list", `{"limit":0}`},
	} {
		if err := v.ValidateCommand(c.subject, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted %s", name, c.body)
		}
	}
}
