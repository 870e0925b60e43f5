package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nats-io/nats.go/jetstream"
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

// TestLongFailingRunDoesNotStallTheHealer: an agent's run with 1,500
// failed attempts (anyone who may write heed.run.> can make one in a
// second) is healed attempt by attempt without the healer reading the
// whole run again for each (it did: the time went in their square, the
// healer stalled for minutes, and other runs' heals timed out); a run
// started after it still gets its heal at once.
func TestLongFailingRunDoesNotStallTheHealer(t *testing.T) {
	h := startHeed(t)
	const run, n = "flood-run", 1500
	if _, err := publishEvent(h.js, "heed.run.started", run, run+"/started", map[string]any{"skill": "flood", "driver": "agent"}); err != nil {
		t.Fatal(err)
	}
	var pending []jetstream.PubAckFuture
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s/s0/a%d/failed", run, i)
		f, err := h.js.PublishMsgAsync(eventMsg("heed.run.step.failed", run, id, map[string]any{"step": "scale", "index": 0, "attempt": i, "tool": "kube_scale",
			"args": map[string]any{"replicas": i}, "error": map[string]any{"message": fmt.Sprintf("invalid replicas %d", i), "kind": "exit", "exit_code": 1}}))
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, f)
	}
	for _, f := range pending {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("a publish was not acknowledged")
		}
	}
	start := time.Now()
	w := watch(t, h.js, "heed.run.*.heal.>")
	id := startRun(t, h.nc, checkSkill, map[string]any{"tag": shortSHA}, "")
	w.waitFor(60*time.Second, "the heal of a run started after the flood", func(e event) bool { return strings.HasPrefix(e.Subject, "heed.run."+id+".heal.") })
	t.Logf("the later run's heal began %s after the flood was stored", time.Since(start).Round(time.Millisecond))
	// Every failure has the healer's verdict (taken up, or given up: its
	// heals of the step are spent) within the minute.
	checkFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		got := len(w.find(func(e event) bool {
			return e.Subject == "heed.run."+run+".heal.triggered" || e.Subject == "heed.run."+run+".heal.gave_up"
		}))
		if got < n {
			return fmt.Errorf("%d of the flood's %d failures have the healer's verdict", got, n)
		}
		return nil
	})
	t.Logf("the healer's verdicts on the flood's %d failures within %s", n, time.Since(start).Round(time.Millisecond))
}
