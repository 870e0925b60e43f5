package skill_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/skill"
)

func computeSkill(expr string) string {
	return fmt.Sprintf("name: b\nsteps:\n  - name: c\n    compute: %q\n", expr)
}

// evalCompute loads a one-step skill and evaluates its compute step,
// measuring how long it took and how much the heap grew.
func evalCompute(t *testing.T, expr string) (v any, took time.Duration, alloc uint64, err error) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	sk, err := skill.Load("b.yaml", []byte(computeSkill(expr)))
	if err != nil {
		return nil, time.Since(start), 0, err
	}
	v, err = sk.Steps[0].Compute.Eval(map[string]any{"inputs": map[string]any{}, "steps": map[string]any{}, "run": map[string]any{"id": "r1"}})
	took = time.Since(start)
	runtime.ReadMemStats(&after)
	return v, took, after.TotalAlloc - before.TotalAlloc, err
}

// TestExpressionsStayWithinBudget: what an outsider can put in a skill
// (heed.cmd.run.start takes the skill's source) fails with its reason,
// fast and small, instead of taking the runner down.
func TestExpressionsStayWithinBudget(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       string // in the error
	}{
		{"repeat of a repeat", `repeat(repeat("x", 999999), 1e6)`, "budget"},
		{"repeat of a repeat, smaller", `repeat(repeat("x", 1e5), 1e5)`, "budget"},
		{"doubling a string", `reduce(1..60, #acc + #acc, "x")`, "budget"},
		{"joining a large string many times", `join(map(1..100000, repeat("y", 60000)))`, "budget"},
		{"toJSON of a large string many times", `toJSON(map(1..1000, repeat("z", 60000)))`, "budget"},
		{"a huge range", `len(1..100000000)`, "memory budget exceeded"},
		{"nested ranges", `len(map(1..1000, len(1..1000)))`, "memory budget exceeded"},
		{"division by zero", `1 / 0`, "not a finite number"},
		{"zero by zero", `0.0 / 0`, "not a finite number"},
		{"integer overflow", `9223372036854775807 + 1`, "integer overflow"},
		{"integer overflow by multiplication", `4611686018427387904 * 4`, "integer overflow"},
		{"120,000 nested parentheses", strings.Repeat("(", 120000) + "1" + strings.Repeat(")", 120000), "the limit is"},
		{"deep nesting", strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200), "deeper than"},
		{"a long source", strings.Repeat("1 + ", 5000) + "1", "bytes; the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, took, alloc, err := evalCompute(t, tc.expr)
			if err == nil {
				t.Fatalf("= %.80v, want an error saying %q", v, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", firstN(err.Error(), 300), tc.want)
			}
			if took > 100*time.Millisecond*raceSlowdown || alloc > 50<<20 {
				t.Errorf("took %s and allocated %d MiB; want under 100 ms and 50 MiB", took, alloc>>20)
			}
		})
	}
}

func TestExpressionsStillWork(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`"a" + "b"`, "ab"},
		{`1 + 2`, "3"},
		{`1.5 * 2`, "3"},
		{`10 - 20`, "-10"},
		{`-4611686018427387904 * 2`, "-9223372036854775808"},
		{`repeat("ab", 3)`, "ababab"},
		{`join(["a", "b"], "-")`, "a-b"},
		{`toJSON({"a": 1})`, "{\n  \"a\": 1\n}"},
		{`len(1..1000)`, "1000"},
		{`reduce(1..10, #acc + #, 0)`, "55"},
		{`7 / 2`, "3.5"},
		{`"(not nested" + ")"`, "(not nested)"},
	} {
		v, _, _, err := evalCompute(t, tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if got := skill.Stringify(v); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestBudgetErrorIs(t *testing.T) {
	_, _, _, err := evalCompute(t, `repeat("x", 100000)`)
	if !errors.Is(err, skill.ErrBudget) {
		t.Errorf("error %v is not ErrBudget", err)
	}
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
