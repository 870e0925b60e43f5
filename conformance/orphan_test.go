package conformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestToolDiesWithHeed: an exec tool never outlives the heed that started
// it. After kill -9 of heed while a tool runs, the tool is gone at once;
// the restarted heed runs the step again (same idempotency key), and at no
// moment do two copies of the tool run.
func TestToolDiesWithHeed(t *testing.T) {
	dir, work := t.TempDir(), t.TempDir()
	tools := filepath.Join(work, "tools.yaml")
	// Each run of the tool records its pid, then sleeps (as itself: exec).
	if err := os.WriteFile(tools, []byte(fmt.Sprintf(`tools:
  sleeper:
    command: /bin/sh
    args: ["-c", "echo $$ >> %s/pids; exec sleep 30"]
    timeout: 60s
`, work)), 0o644); err != nil {
		t.Fatal(err)
	}
	pids := func() []int {
		b, _ := os.ReadFile(filepath.Join(work, "pids"))
		var out []int
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	alive := func(pid int) bool { return syscall.Kill(pid, 0) == nil }

	h := startHeedWith(t, dir, tools)
	id := startRun(t, h.nc, "name: sleepy\nsteps:\n  - name: nap\n    tool: sleeper\n", nil, "")
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if len(pids()) == 0 {
			return errors.New("the tool has not started")
		}
		return nil
	})
	first := pids()[0]
	h.kill()
	checkFor(t, 2*time.Second, 20*time.Millisecond, func() error {
		if alive(first) {
			return fmt.Errorf("tool process %d still runs after heed was killed", first)
		}
		return nil
	})

	// The restarted heed runs the step again, once; the old copy is gone.
	h2 := startHeedWith(t, dir, tools)
	checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if len(pids()) < 2 {
			return errors.New("the step has not been run again")
		}
		return nil
	})
	ps := pids()
	if len(ps) != 2 || ps[1] == first || alive(first) || !alive(ps[1]) {
		t.Fatalf("tool runs %v (first %d alive: %v); want the first dead and one new copy running", ps, first, alive(first))
	}
	// Cancel the run: its tool is stopped too.
	mustRequest(t, h2.nc, "heed.cmd.run.cancel", map[string]any{"run_id": id, "by": "conformance"}, nil)
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if alive(ps[1]) {
			return fmt.Errorf("tool process %d still runs after its run was cancelled", ps[1])
		}
		return nil
	})
}
