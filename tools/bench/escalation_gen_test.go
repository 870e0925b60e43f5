package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

// The generator is deterministic, draws every kind, and most of its work
// repeats: the mix the simulation documents.
func TestGenerateDeterministicMix(t *testing.T) {
	a, b := generate(genSeed, 100), generate(genSeed, 100)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave different operations")
	}
	if c := generate(genSeed+1, 100); slices.Equal(a, c) {
		t.Error("another seed gave the same operations")
	}
	kinds := map[int]int{}
	pairs := map[string]int{}
	risky, critical := 0, 0
	for _, o := range a {
		kinds[o.kind]++
		pairs[o.operation+o.env+o.scope]++
		if o.risk > 0.4 || o.confidence < 0.5 {
			risky++
		}
		if o.critical() {
			critical++
		}
	}
	if len(kinds) != len(opKinds) {
		t.Errorf("%d of %d kinds drawn: %v", len(kinds), len(opKinds), kinds)
	}
	repeated := 0
	for _, n := range pairs {
		if n > 1 {
			repeated += n
		}
	}
	if repeated < 80 {
		t.Errorf("%d of 100 operations repeat an operation+scope, want most", repeated)
	}
	if risky < 20 || risky > 50 || critical == 0 || critical > 10 {
		t.Errorf("%d operations for people, %d critical: not the documented mix", risky, critical)
	}
	t.Logf("mix: %v; %d for people (%d critical)", mixSummary(a), risky, critical)
}

// histP99 finds the bucket that holds the 99th percentile of what was
// observed between two reads, and says when it is past the last bucket.
func TestHistP99(t *testing.T) {
	inf := math.Inf(1)
	before := map[float64]float64{0.0001: 10, 0.001: 10, 0.01: 10, inf: 10}
	after := map[float64]float64{0.0001: 910, 0.001: 1005, 0.01: 1010, inf: 1010}
	if d, n := histP99(before, after); d != time.Millisecond || n != 1000 {
		t.Errorf("p99 = %v of %v, want 1ms of 1000", d, n)
	}
	after[inf] = 1100
	if d, _ := histP99(before, after); bucketBound(d) != "> 10 ms (past the last bucket)" {
		t.Errorf("p99 past the buckets = %v", d)
	}
}

// cutCeiling counts what no cache under the seed's rule can take from
// people: critical operations, and keys decided 3 times or fewer before.
func TestCutCeiling(t *testing.T) {
	op := func(operation, scope string, risk float64) genOp {
		return genOp{operation: operation, env: "prod", scope: scope, risk: risk, confidence: 0.8}
	}
	ops := []genOp{
		op("deploy", "a", 0.8), op("deploy", "a", 0.8), op("deploy", "a", 0.8), // 3 a pass: the second pass's 2nd and 3rd are cached
		op("restart", "b", 0.75), // once a pass: never more than 1 decision before
		op("delete", "c", 0.97),  // critical
		op("test", "d", 0.1),     // the matrix approves it
	}
	people, baseline, cut := cutCeiling(ops)
	if people != 3 || baseline != 5 || math.Abs(cut-0.4) > 1e-9 {
		t.Fatalf("people %d of %d, cut %.2f; want 3 of 5 (deploy's first of the pass, restart, delete), 0.40", people, baseline, cut)
	}
	p, b, c := cutCeiling(generate(genSeed, 100))
	t.Logf("seed %d: at most %d of %d to people in the second pass under the seed's rule: a cut of %.0f%% at most", genSeed, p, b, 100*c)
}
