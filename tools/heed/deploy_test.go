package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// heed deploy permissions writes a configuration nats-server loads, one
// seed per user (mode 0600), and keeps the seeds when run again.
func TestDeployPermissions(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "secrets")
	out, errOut, code := runCLI(t, "deploy", "permissions", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, name := range []string{"runner", "confirm-router", "escalator", "healer", "learner", "indexer", "changesets", "agent", "bridge", "console", "ops"} {
		st, err := os.Stat(filepath.Join(dir, name+".nk"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s.nk: %v %v", name, st, err)
		}
	}
	conf := filepath.Join(dir, "heed-permissions.conf")
	first, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server does not load it: %v\n%s", err, first)
	}
	if len(opts.Nkeys) != 11 {
		t.Errorf("%d nkey users, want 11", len(opts.Nkeys))
	}
	for _, u := range opts.Nkeys {
		if u.Permissions == nil || u.Permissions.Publish == nil || len(u.Permissions.Publish.Allow) == 0 {
			t.Errorf("user %s has no publish permissions", u.Nkey)
		}
	}
	out, _, code = runCLI(t, "deploy", "permissions", "--out", dir)
	if code != 0 || strings.Count(out, "(kept)") != 11 {
		t.Errorf("second run: exit %d, want every seed kept:\n%s", code, out)
	}
	if again, _ := os.ReadFile(conf); string(again) != string(first) {
		t.Error("a second run with the same users changed the configuration")
	}
}

// --isolate-agents gives each agent its own path and inboxes, in a
// configuration nats-server loads; other roles are unchanged.
func TestDeployPermissionsIsolatedAgents(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "secrets")
	out, errOut, code := runCLI(t, "deploy", "permissions", "--out", dir, "--isolate-agents", "--user", "ci-bot:agent", "--user", "review-bot:agent", "--user", "slack:bridge")
	if code != 0 || !strings.Contains(out, "isolated: heed.cmd.as.ci-bot.run.*") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "heed-permissions.conf"))
	if err != nil {
		t.Fatalf("nats-server does not load it: %v", err)
	}
	agents := 0
	for _, u := range opts.Nkeys {
		p := u.Permissions
		pub := strings.Join(p.Publish.Allow, " ")
		switch {
		case strings.Contains(pub, "heed.cmd.as.ci-bot.run.>"), strings.Contains(pub, "heed.cmd.as.review-bot.run.>"):
			agents++
			if strings.Contains(pub, "$JS.API") || strings.Contains(pub, "heed.cmd.run.") || strings.Contains(pub, "heed.run.>") {
				t.Errorf("an isolated agent may read the log or use the shared run path: %s", pub)
			}
			if sub := strings.Join(p.Subscribe.Allow, " "); sub != "_INBOX.ci-bot.>" && sub != "_INBOX.review-bot.>" {
				t.Errorf("an isolated agent subscribes to %s, want its own inboxes only", sub)
			}
		case strings.Contains(pub, "heed.cmd.confirm.answer"): // the bridge
			if !strings.Contains(strings.Join(p.Subscribe.Allow, " "), "_INBOX.>") {
				t.Errorf("the bridge lost its inbox: %v", p.Subscribe.Allow)
			}
		default:
			t.Errorf("a user with publish permissions %s", pub)
		}
	}
	if agents != 2 {
		t.Errorf("%d isolated agents, want 2", agents)
	}
}
