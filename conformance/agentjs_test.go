package conformance

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJavaScriptAgent runs examples/agent-js — an agent written in
// JavaScript with the official NATS client and plain CloudEvents headers —
// against heed. It starts a run, does a corrected retry, answers the
// confirmation, drives a run of its own, and checks every outcome itself;
// it exits 0 only if every check passed. `make test` installs its npm
// packages (tools/ci/deps.sh).
func TestJavaScriptAgent(t *testing.T) {
	dir := filepath.Join(repoRoot, "examples", "agent-js")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed: the JavaScript agent cannot run (tools/ci/deps.sh installs it): %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@nats-io", "transport-node")); err != nil {
		t.Fatalf("the agent's npm packages are not installed (run tools/ci/deps.sh, or npm ci in %s): %v", dir, err)
	}
	h := startHeed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Twice against the same heed: the agent must not depend on a fresh
	// log.
	for i := 1; i <= 2; i++ {
		cmd := exec.CommandContext(ctx, node, "agent.mjs")
		cmd.Dir = dir
		cmd.Env = append(childEnv(t.TempDir()), "HEED_NATS_URL="+h.url, "HEED_WAIT_S=30")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the JavaScript agent (run %d) failed: %v\n%s", i, err, out)
		}
		t.Logf("the JavaScript agent (run %d) passed:\n%s", i, lastLines(string(out), 3))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
