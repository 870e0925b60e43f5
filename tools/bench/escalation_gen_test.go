package main

import (
	"slices"
	"testing"
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
