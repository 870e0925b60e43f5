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
