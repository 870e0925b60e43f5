package events_test

import (
	"encoding/json"
	"testing"

	"github.com/heedhq/heed/events"
)

// TestQuorumSchema: approvers and quorum are accepted on a request (event
// and command) only in their documented shape.
func TestQuorumSchema(t *testing.T) {
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	base := events.ConfirmRequestedData{
		Message: "deploy?", Requester: "agent",
		Options: []events.Option{{Label: "Approve", Value: "approve"}, {Label: "Deny", Value: "deny"}},
	}
	ok := base
	ok.Approvers = []string{"alice", "bob", "carol"}
	ok.Quorum = &events.Quorum{Required: 2, Veto: []string{"deny"}}
	good, err := json.Marshal(ok)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(events.ConfirmRequested, good); err != nil {
		t.Errorf("event with approvers and quorum: %v", err)
	}
	if err := v.ValidateCommand("heed.cmd.confirm.request", good); err != nil {
		t.Errorf("command with approvers and quorum: %v", err)
	}
	for name, body := range map[string]string{
		"required 1":          `{"message":"m","options":[{"label":"a","value":"a"}],"requester":"x","quorum":{"required":1}}`,
		"required missing":    `{"message":"m","options":[{"label":"a","value":"a"}],"requester":"x","quorum":{"veto":["a"]}}`,
		"quorum extra field":  `{"message":"m","options":[{"label":"a","value":"a"}],"requester":"x","quorum":{"required":2,"of":3}}`,
		"approvers duplicate": `{"message":"m","options":[{"label":"a","value":"a"}],"requester":"x","approvers":["alice","alice"]}`,
		"approvers empty":     `{"message":"m","options":[{"label":"a","value":"a"}],"requester":"x","approvers":[]}`,
		"approver empty":      `{"message":"m","options":[{"label":"a","value":"a"}],"requester":"x","approvers":[""]}`,
	} {
		if err := v.Validate(events.ConfirmRequested, []byte(body)); err == nil {
			t.Errorf("event %s: accepted", name)
		}
		if err := v.ValidateCommand("heed.cmd.confirm.request", []byte(body)); err == nil {
			t.Errorf("command %s: accepted", name)
		}
	}
}
