package service

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"
)

func TestIdleGate(t *testing.T) {
	cfg := IdleRelease{QuietTicks: 3}
	cfg.defaults()
	const busy, quiet, spike, big = 8 << 20, 1024, 2 << 20, 64 << 20
	cases := []struct {
		name  string
		ticks [][2]uint64 // allocated, held
		want  []bool
	}{
		{"quiet from the start: nothing to give back", [][2]uint64{{quiet, big}, {quiet, big}, {quiet, big}, {quiet, big}}, []bool{false, false, false, false}},
		{"released once, three quiet ticks after work", [][2]uint64{{busy, big}, {quiet, big}, {quiet, big}, {quiet, big}, {quiet, big}, {quiet, big}}, []bool{false, false, false, true, false, false}},
		{"work resets the count", [][2]uint64{{busy, big}, {quiet, big}, {quiet, big}, {busy, big}, {quiet, big}, {quiet, big}, {quiet, big}}, []bool{false, false, false, false, false, false, true}},
		{"too little held: waits until it is worth it", [][2]uint64{{busy, big}, {quiet, 1 << 20}, {quiet, 1 << 20}, {quiet, 1 << 20}, {quiet, big}, {quiet, big}}, []bool{false, false, false, false, true, false}},
		{"small periodic work at rest neither keeps it from releasing nor makes it release again", [][2]uint64{{busy, big}, {quiet, big}, {spike, big}, {quiet, big}, {quiet, big}, {spike, big}, {quiet, big}, {quiet, big}}, []bool{false, false, false, true, false, false, false, false}},
		{"each burst gets its releases", [][2]uint64{{busy, big}, {quiet, big}, {quiet, big}, {quiet, big}, {busy, big}, {quiet, big}, {quiet, big}, {quiet, big}}, []bool{false, false, false, true, false, false, false, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := &idleGate{cfg: cfg}
			for i, tk := range c.ticks {
				if got := g.observe(tk[0], tk[1]); got != c.want[i] {
					t.Fatalf("tick %d (allocated %d, held %d): release %v, want %v", i, tk[0], tk[1], got, c.want[i])
				}
			}
		})
	}
}

// TestReleaseIdleMemoryGivesBack allocates and drops a large heap, then
// lets the process go quiet: the memory held from the OS must fall.
func TestReleaseIdleMemoryGivesBack(t *testing.T) {
	samples := make([]metrics.Sample, len(memSampleNames))
	for i, n := range memSampleNames {
		samples[i].Name = n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ReleaseIdleMemory(ctx, nil, IdleRelease{Tick: 50 * time.Millisecond, QuietTicks: 3})
	time.Sleep(100 * time.Millisecond) // its first sample comes before the work
	var keep [][]byte
	for range 200 {
		keep = append(keep, make([]byte, 1<<20))
	}
	for i := range keep {
		keep[i][0] = 1
	}
	held := readMemSample(samples).mapped
	keep = nil
	_ = keep
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := readMemSample(samples).mapped
		if now < held-100<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("held %d MiB after 200 MiB was dropped and the process went quiet (was %d MiB)", now>>20, held>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
