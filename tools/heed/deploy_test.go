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
