package conformance

// Agents kept from each other's runs (heed deploy permissions
// --isolate-agents), tested from outside with plain nats.go clients as any
// agent would connect, and with heed's CLI.

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestIsolatedAgents(t *testing.T) {
	pki := newPKI(t)
	secrets := filepath.Join(t.TempDir(), "secrets")
	out, code := heedCLI(t, pki, "deploy", "permissions", "--out", secrets, "--isolate-agents",
		"--user", "services:service", "--user", "alice:agent", "--user", "bob:agent")
	if code != 0 || !strings.Contains(out, "isolated: heed.cmd.as.alice.run.*") {
		t.Fatalf("heed deploy permissions --isolate-agents: exit %d\n%s", code, out)
	}
	url := startSecuredNATS(t, pki, secrets)
	startHeedAs(t, pki, url, filepath.Join(secrets, "services.nk"))
	// Each agent's replies come to its own inboxes.
	alice := connectAs(t, url, pki, filepath.Join(secrets, "alice.nk"), nats.CustomInboxPrefix("_INBOX.alice"))
	bob := connectAs(t, url, pki, filepath.Join(secrets, "bob.nk"), nats.CustomInboxPrefix("_INBOX.bob"))

	// alice starts a run on her path and follows it until it pauses.
	var started runReply
	mustRequest(t, alice.Conn, "heed.cmd.as.alice.run.start", map[string]any{"skill": map[string]any{"source": confirmSkill(600)}}, &started)
	type runEvents struct {
		Status  string `json:"status"`
		Agent   string `json:"agent"`
		LastSeq uint64 `json:"last_seq"`
		Events  []struct {
			Seq   uint64          `json:"seq"`
			Event json.RawMessage `json:"event"`
		} `json:"events"`
	}
	var after uint64
	for deadline := time.Now().Add(30 * time.Second); ; {
		var r runEvents
		mustRequest(t, alice.Conn, "heed.cmd.as.alice.run.get", map[string]any{"run_id": started.RunID, "after": after, "wait_ms": 5000}, &r)
		after = r.LastSeq
		if r.Agent != "alice" {
			t.Fatalf("alice's run belongs to %q", r.Agent)
		}
		if r.Status == "paused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's run did not pause: %s", r.Status)
		}
	}

	// bob, on his own path: heed refuses alice's run, as it refuses a run
	// that does not exist.
	for _, c := range []struct{ subject, run string }{
		{"heed.cmd.as.bob.run.get", started.RunID},
		{"heed.cmd.as.bob.run.continue", started.RunID},
		{"heed.cmd.as.bob.run.cancel", started.RunID},
		{"heed.cmd.as.bob.run.get", "no-such-run"},
	} {
		body := map[string]any{"run_id": c.run}
		if strings.HasSuffix(c.subject, "continue") {
			body["choice"] = "proceed"
		}
		err := request(bob.Conn, c.subject, body, nil)
		var ce *cmdError
		if !errors.As(err, &ce) || ce.Code != "forbidden" || !strings.Contains(ce.Message, "not one of agent bob's runs") {
			t.Errorf("bob: %s %s: %v, want forbidden", c.subject, c.run, err)
		}
	}
	// Everything else the server refuses him, visibly.
	bob.refused(t, "bob on alice's path", "heed.cmd.as.alice.run.get", map[string]any{"run_id": started.RunID})
	bob.refused(t, "bob's plain run read", "heed.cmd.run.get", map[string]any{"run_id": started.RunID})
	bob.refused(t, "bob's plain start", "heed.cmd.run.start", map[string]any{"skill": map[string]any{"source": confirmSkill(60)}})
	bob.refused(t, "bob answers", "heed.cmd.confirm.answer", map[string]any{"id": started.RunID + "-s1-a1", "choice": "proceed", "by": "user:bob"})
	bob.refused(t, "bob reads the log (direct get)", "$JS.API.DIRECT.GET."+eventStream+".heed.run."+started.RunID+".requested", nil)
	bob.refused(t, "bob reads the log (a consumer)", "$JS.API.CONSUMER.CREATE."+eventStream, map[string]any{"stream_name": eventStream, "config": map[string]any{"filter_subject": "heed.run.>"}})
	bob.refused(t, "bob reads the index", "$JS.API.DIRECT.GET.KV_heed_index.$KV.heed_index.run."+started.RunID, nil)
	for _, subject := range []string{"heed.run.>", "_INBOX.>", "_INBOX.alice.>"} {
		if _, err := bob.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		bob.waitDenied(t, "bob listens on "+subject, subject)
	}

	// heed's CLI as an isolated agent: bob without --as-agent is refused at
	// once; alice's run of a skill follows it to its end through her path.
	skill := filepath.Join(t.TempDir(), "confirm.yaml")
	if err := os.WriteFile(skill, []byte(confirmSkill(600)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = heedCLI(t, pki, "run", skill, "--yes", "--nats-url", url, "--nats-nkey", filepath.Join(secrets, "bob.nk"))
	if code == 0 || !strings.Contains(out, "forbidden") || !strings.Contains(out, "--as-agent") {
		t.Errorf("heed run as bob without --as-agent: exit %d\n%s", code, out)
	}
	out, code = heedCLI(t, pki, "run", skill, "--yes", "--as-agent", "alice", "--nats-url", url, "--nats-nkey", filepath.Join(secrets, "alice.nk"))
	if code != 0 || !strings.Contains(out, "completed") {
		t.Errorf("heed run --as-agent alice: exit %d\n%s", code, out)
	}

	// alice answers her own run on her path; it completes.
	mustRequest(t, alice.Conn, "heed.cmd.as.alice.run.continue", map[string]any{"run_id": started.RunID, "choice": "proceed"}, nil)
	for deadline := time.Now().Add(30 * time.Second); ; {
		var r runEvents
		mustRequest(t, alice.Conn, "heed.cmd.as.alice.run.get", map[string]any{"run_id": started.RunID, "after": after, "wait_ms": 5000}, &r)
		after = r.LastSeq
		if r.Status == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's run did not complete: %s", r.Status)
		}
	}
	if v := alice.violations(); len(v) > 0 {
		t.Errorf("alice met permission violations on her own path: %q", v)
	}
}
