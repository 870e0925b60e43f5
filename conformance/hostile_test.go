package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestHostileSkills: a skill is whatever a client sends with
// heed.cmd.run.start. Expressions that would take the runner down (a
// string of a terabyte, 120,000 nested parentheses) are refused or fail
// their step with the reason, fast; heed keeps serving; and after a restart
// nothing is evaluated again.
func TestHostileSkills(t *testing.T) {
	dir := t.TempDir()
	h := startHeedIn(t, dir)
	w := watch(t, h.js, "heed.run.>")

	compute := func(expr string) string {
		return fmt.Sprintf("name: hostile\nsteps:\n  - name: boom\n    compute: %s\n", strings.TrimSpace(mustJSON(expr)))
	}
	var failed []string
	for _, expr := range []string{`repeat(repeat("x", 999999), 1e6)`, `repeat(repeat("x", 1e5), 1e5)`, `reduce(1..60, #acc + #acc, "x")`} {
		start := time.Now()
		id := startRun(t, h.nc, compute(expr), nil, "")
		e := w.waitSubject(10*time.Second, "heed.run."+id+".failed")
		var d struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		e.decode(t, &d)
		if !strings.Contains(d.Error.Message, "budget") {
			t.Errorf("%s: the run failed with %q; want the reason (a budget)", expr, d.Error.Message)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: failed after %s", expr, took)
		}
		failed = append(failed, id)
	}
	// Refused before anything runs: nesting the parser would recurse into.
	deep := compute(strings.Repeat("(", 120000) + "1" + strings.Repeat(")", 120000))
	start := time.Now()
	err := request(h.nc, "heed.cmd.run.start", map[string]any{"skill": map[string]any{"source": deep}, "requested_by": "conformance"}, nil)
	var ce *cmdError
	if !errors.As(err, &ce) || ce.Code != "invalid_request" || !strings.Contains(ce.Message, "limit") {
		t.Errorf("120,000 nested parentheses: %v; want invalid_request saying the limit", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusing 120,000 nested parentheses took %s", took)
	}

	// Still serving.
	ok := startRun(t, h.nc, compute(`1 + 1`), nil, "")
	w.waitSubject(10*time.Second, "heed.run."+ok+".completed")

	// After a restart the failed runs stay as they ended: nothing of them
	// is evaluated again (their logs do not grow).
	counts := map[string]int{}
	for _, id := range failed {
		counts[id] = len(streamMsgs(t, h.js, "heed.run."+id+".>"))
	}
	h.stop()
	h2 := startHeedIn(t, dir)
	probe := startRun(t, h2.nc, compute(`2 + 2`), nil, "")
	w2 := watch(t, h2.js, "heed.run."+probe+".>")
	w2.waitSubject(10*time.Second, "heed.run."+probe+".completed") // the runner has worked through its backlog
	for _, id := range failed {
		if n := len(streamMsgs(t, h2.js, "heed.run."+id+".>")); n != counts[id] {
			t.Errorf("run %s has %d events after the restart, %d before: it was evaluated again", id, n, counts[id])
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
