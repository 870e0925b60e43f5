package skill_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/heedhq/heed/lib/skill"
)

func TestConfirmApproversAndQuorum(t *testing.T) {
	good := `name: t
steps:
  - name: scale
    confirm:
      message: scale prod-db down?
      options:
        - {label: Approve, value: approve}
        - {label: Deny, value: deny}
      approvers: [alice, bob, carol]
      quorum: {required: 2, veto: [deny]}
`
	sk, err := skill.Load("s.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	c := sk.Steps[0].Confirm
	if !reflect.DeepEqual(c.Approvers, []string{"alice", "bob", "carol"}) || c.Quorum == nil || c.Quorum.Required != 2 || !reflect.DeepEqual(c.Quorum.Veto, []string{"deny"}) {
		t.Fatalf("confirm = approvers %v quorum %+v", c.Approvers, c.Quorum)
	}
	bad := map[string]struct{ tail, want string }{
		"empty approvers":       {"      approvers: []\n", "approvers must be a non-empty list"},
		"duplicate approver":    {"      approvers: [alice, alice]\n", `approver "alice" appears twice`},
		"empty approver":        {"      approvers: [alice, '']\n", "an approver is empty"},
		"required 1":            {"      quorum: {required: 1}\n", "quorum.required is 1"},
		"required not a number": {"      quorum: {required: two}\n", "quorum.required must be a whole number"},
		"required missing":      {"      quorum: {veto: [deny]}\n", "quorum needs required"},
		"more than approvers":   {"      approvers: [alice, bob]\n      quorum: {required: 3}\n", "quorum.required is 3 but only 2 approvers are named"},
		"veto not an option":    {"      quorum: {required: 2, veto: [cancel]}\n", `veto "cancel" is not one of the option values`},
		"unknown quorum field":  {"      quorum: {required: 2, of: 3}\n", `unknown field "of"`},
	}
	head := `name: t
steps:
  - name: scale
    confirm:
      message: scale?
      options:
        - {label: Approve, value: approve}
        - {label: Deny, value: deny}
`
	for name, tc := range bad {
		_, err := skill.Load("s.yaml", []byte(head+tc.tail))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}
