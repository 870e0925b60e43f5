package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunInterruptedExits130: Ctrl-C stops `heed run` following a run, with
// exit status 130 and a line saying the run goes on — and it does: the run
// still waits at its question (docs/SKILLS.md, Runs).
func TestRunInterruptedExits130(t *testing.T) {
	h := startHeedWithTools(t)
	run := startProc(t, "heed run", "run", "--nats-url", h.url, "../../skills/release_prod.yaml", "-i", "commit_sha="+testSHA)
	run.waitOutput("waiting for an answer", 30*time.Second)
	runID := strings.Fields(strings.TrimPrefix(run.stdout.String(), "run "))[0]
	if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.done:
	case <-time.After(10 * time.Second):
		t.Fatal("heed run still follows the run 10s after SIGINT")
	}
	if code := run.cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("heed run exited %d after SIGINT, want 130\nstderr: %s", code, run.stderr.String())
	}
	if got := run.stderr.String(); !strings.Contains(got, "stopped following; run "+runID+" goes on") {
		t.Errorf("heed run said %q after SIGINT, want that the run goes on", got)
	}
	out, _, code := runCLI(t, "runs", "--nats-url", h.url, "--status", "paused")
	if code != 0 || !strings.Contains(out, runID) {
		t.Errorf("after Ctrl-C the run is not paused at its question (exit %d):\n%s", code, out)
	}
}
