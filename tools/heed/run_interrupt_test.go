package main

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunInterruptedLeavesRunWaiting: Ctrl-C stops `heed run` following a run, with
// exit status 130 and a line saying the run goes on — and it does: the run
// still waits at its question (docs/SKILLS.md, Runs).
func TestRunInterruptedLeavesRunWaiting(t *testing.T) {
	h := startHeedWithTools(t)
	run := startProc(t, "heed run", "run", "--nats-url", h.url, "../../skills/release_prod.yaml", "-i", "commit_sha="+testSHA)
	ulid := regexp.MustCompile(`\b01[0-9a-hjkmnp-tv-z]{24}\b`)
	var runID string
	checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if runID = ulid.FindString(run.stdout.String()); runID == "" {
			return fmt.Errorf("heed run has not named its run:\n%s", run.stdout.String())
		}
		if out, _, _ := runCLI(t, "runs", "--nats-url", h.url, "--status", "paused"); !strings.Contains(out, runID) {
			return fmt.Errorf("run %s is not paused at its question yet", runID)
		}
		return nil
	})
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
	if got := run.stderr.String(); !strings.Contains(got, runID) || !strings.Contains(got, "goes on") {
		t.Errorf("heed run said %q after SIGINT, want that run %s goes on", got, runID)
	}
	out, _, code := runCLI(t, "runs", "--nats-url", h.url, "--status", "paused")
	if code != 0 || !strings.Contains(out, runID) {
		t.Errorf("after Ctrl-C the run is not paused at its question (exit %d):\n%s", code, out)
	}
}
