package runner_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/tool"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go"
)

// loadSkill alternates NATS tool calls and computed values; run with input
// n it ends with result = 10n.
var loadSkill = func() string {
	var b strings.Builder
	b.WriteString("name: load\ninputs:\n  n: {type: integer, required: true}\nsteps:\n")
	prev := "inputs.n * 0"
	for k := 1; k <= 5; k++ {
		// t_k: sum = prev + n (t1: n + 0)
		b.WriteString(fmt.Sprintf("  - name: t%d\n    tool: add\n    args: {a: \"{{ %s }}\", b: \"{{ inputs.n }}\"}\n    output: v%d\n", k, prev, k))
		out := fmt.Sprintf("c%d", k)
		if k == 5 {
			out = "result"
		}
		// c_k: v_k.sum + n
		b.WriteString(fmt.Sprintf("  - name: c%d\n    compute: v%d.sum + inputs.n\n    output: %s\n", k, k, out))
		prev = out
	}
	return b.String()
}()

// TestLoad: 1,000 concurrent runs of a 10-step skill (5 NATS tool calls, 5
// computed values) all complete with the result their own input gives,
// and every tool step is called exactly once.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("long tier (1,000 runs, ~15 s): skipped by -short (make test-fast); make test and make unit run it")
	}
	runs := loadRuns()
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var callsMu sync.Mutex
	calls := map[string]int{}
	svc, err := tool.Serve(ctx, h.env.Conn(t), "add", "adds a and b", func(_ context.Context, req tool.Request) (any, error) {
		a, okA := req.Args["a"].(float64)
		b, okB := req.Args["b"].(float64)
		if !okA || !okB {
			return nil, &tool.Error{Kind: "bad_args", Message: fmt.Sprintf("a and b must be numbers: %v", req.Args)}
		}
		callsMu.Lock()
		calls[req.IdempotencyKey]++
		callsMu.Unlock()
		return map[string]any{"sum": a + b}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	h.runner(runner.Config{ToolsFile: writeTools(t, "  add: {kind: nats}\n"), HealWait: -1})

	var mu sync.Mutex
	results := map[string]*events.Event{}
	allDone := make(chan struct{})
	record := func(m *nats.Msg) {
		ev, err := h.bus.Codec().Decode(m)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := results[ev.Subject()]; !seen {
			results[ev.Subject()] = ev
			if len(results) == runs {
				close(allDone)
			}
		}
	}
	for _, subject := range []string{"heed.run.*.completed", "heed.run.*.failed", "heed.run.*.cancelled"} {
		sub, err := h.nc.Subscribe(subject, record)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	input := make(map[string]int, runs)
	var inMu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				id, err := startRun(h, loadSkill, map[string]any{"n": n})
				if err != nil {
					t.Error(err)
					continue
				}
				inMu.Lock()
				input[id] = n
				inMu.Unlock()
			}
		}()
	}
	for n := 1; n <= runs; n++ {
		work <- n
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		return
	}
	started := time.Since(began)

	select {
	case <-allDone:
	case <-time.After(150 * time.Second):
		mu.Lock()
		n := len(results)
		mu.Unlock()
		t.Fatalf("%d of %d runs ended within 150s", n, runs)
	}
	took := time.Since(began)

	mu.Lock()
	defer mu.Unlock()
	for id, n := range input {
		ev := results[id]
		if ev == nil {
			t.Errorf("run %s (n=%d) has no end", id, n)
			continue
		}
		if events.Type(ev.Type()) != events.RunCompleted {
			t.Errorf("run %s (n=%d) ended with %s: %s", id, n, ev.Type(), ev.Data())
			continue
		}
		d := decode[events.RunCompletedData](t, ev)
		if d.Outputs["result"] != float64(10*n) {
			t.Errorf("run %s: n=%d gave result %v, want %d; outputs %v", id, n, d.Outputs["result"], 10*n, d.Outputs)
		}
		for k := 1; k <= 5; k++ {
			key := tool.IdempotencyKey(id, 2*(k-1), 1)
			callsMu.Lock()
			c := calls[key]
			callsMu.Unlock()
			if c != 1 {
				t.Errorf("run %s: tool step t%d called %d times", id, k, c)
			}
		}
	}
	callsMu.Lock()
	if len(calls) != 5*runs {
		t.Errorf("%d distinct tool calls, want %d", len(calls), 5*runs)
	}
	callsMu.Unlock()
	if testing.Verbose() {
		t.Logf("%d runs started in %s, all completed in %s (%.0f runs/s, %.0f events/s)", runs, started.Round(time.Millisecond), took.Round(time.Millisecond),
			float64(runs)/took.Seconds(), float64(23*runs)/took.Seconds())
	}
}

// loadRuns is 1,000, or HEED_LOAD_RUNS to try other sizes.
func loadRuns() int {
	if n, err := strconv.Atoi(os.Getenv("HEED_LOAD_RUNS")); err == nil && n > 0 {
		return n
	}
	return 1000
}
