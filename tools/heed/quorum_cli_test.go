package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const cliQuorumSkill = `name: cli_quorum
steps:
  - name: approve_scale
    confirm:
      message: Scale prod-db down?
      options:
        - {label: Approve, value: approve}
        - {label: Deny, value: deny}
      approvers: [alice, bob, carol]
      quorum: {required: 2}
`

// TestConfirmQuorumCLI: heed confirm answer with approvers and a quorum:
// a non-approver is refused (exit 2), a vote is counted and said so, a
// second vote by the same person is refused (exit 1, as a late answer),
// heed confirm show lists the votes, and the vote that completes the
// quorum answers.
func TestConfirmQuorumCLI(t *testing.T) {
	t.Parallel()
	url, dir := startHeedCLI(t)
	skill := filepath.Join(dir, "quorum.yaml")
	if err := os.WriteFile(skill, []byte(cliQuorumSkill), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append([]string{"--nats-url", url}, args...)...)
	}
	out, errOut, code := cli("run", skill, "--detach", "--json")
	var started struct {
		RunID string `json:"run_id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &started) != nil || started.RunID == "" {
		t.Fatalf("run --detach: exit %d\n%s%s", code, out, errOut)
	}
	cid := started.RunID + "-s0-a1"
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		_, _, code := cli("confirm", "show", cid)
		if code != 0 {
			return os.ErrNotExist
		}
		return nil
	})

	out, errOut, code = cli("confirm", "answer", cid, "approve", "--by", "mallory")
	if code != 2 || !strings.Contains(errOut, "mallory may not answer this confirmation: its approvers are alice, bob, carol") {
		t.Errorf("mallory: exit %d, want 2 naming the approvers\n%s%s", code, out, errOut)
	}
	out, errOut, code = cli("confirm", "answer", cid, "approve", "--by", "alice")
	if code != 0 || strings.TrimSpace(out) != "vote counted: 1 of 2 for approve (alice)" {
		t.Errorf("alice: exit %d, want 0 and the vote counted\n%s%s", code, out, errOut)
	}
	out, errOut, code = cli("confirm", "answer", cid, "deny", "--by", "alice")
	if code != 1 || !strings.Contains(errOut, "alice has voted already") {
		t.Errorf("alice again: exit %d, want 1 (already voted)\n%s%s", code, out, errOut)
	}
	out, _, _ = cli("confirm", "show", cid)
	for _, want := range []string{"approvers: alice, bob, carol", "quorum: 2 must agree", "votes: approve by alice, 1 of 2 needed", "waiting"} {
		if !strings.Contains(out, want) {
			t.Errorf("confirm show lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = cli("confirm", "answer", cid, "approve", "--by", "bob", "--json")
	var reply struct {
		Counted bool `json:"counted"`
		By      string
		Votes   []struct{ By string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &reply) != nil || reply.Counted || reply.By != "bob" || len(reply.Votes) != 2 {
		t.Errorf("bob: exit %d, want the answer that completes the quorum\n%s%s", code, out, errOut)
	}
	out, errOut, code = cli("confirm", "answer", cid, "approve", "--by", "carol")
	if code != 1 || !strings.Contains(errOut, "already answered by bob") {
		t.Errorf("carol after the quorum: exit %d, want 1 (already answered)\n%s%s", code, out, errOut)
	}
}
