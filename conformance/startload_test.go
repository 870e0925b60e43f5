package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStartStaysAnswered: while 10 slow start requests are in flight
// (skills of about 190 KiB, every step an expression to compile, refused
// at the end for a tool the runner does not have, so that they cost the
// request and nothing after it), small start requests are still answered
// quickly: p50 within 50 ms and p90 within 500 ms (p90 within 250 ms alone under
// -short).
func TestStartStaysAnswered(t *testing.T) {
	h := startHeed(t)
	big := func(n int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "name: big%d\nsteps:\n", n)
		expr := strings.TrimSuffix(strings.Repeat("1 + ", 400), " + ")
		for i := range 120 {
			fmt.Fprintf(&b, "  - name: s%d\n    compute: '%s'\n", i, expr)
		}
		b.WriteString("  - name: last\n    tool: no_such_tool\n")
		return b.String()
	}
	small := "name: small\nsteps:\n  - name: a\n    compute: '1 + 1'\n"
	// Warm up (the first request of a kind pays for what is cached after).
	for range 3 {
		startRun(t, h.nc, small, nil, "")
	}
	var slow sync.WaitGroup
	var slowAnswered atomic.Int64
	stop := make(chan struct{})
	for i := range 10 {
		slow.Add(1)
		go func() {
			defer slow.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = request(h.nc, "heed.cmd.run.start", map[string]any{"skill": map[string]any{"source": big(i*1000 + j)}, "requested_by": "load"}, nil)
				slowAnswered.Add(1)
			}
		}()
	}
	// The slow ones are in flight: the runner has answered one of them,
	// so it is working through them, and its sender has its next one out.
	checkFor(t, 60*time.Second, 5*time.Millisecond, func() error {
		if slowAnswered.Load() == 0 {
			return errors.New("no large start request answered yet")
		}
		return nil
	})
	var lat []time.Duration
	for range 40 {
		start := time.Now()
		startRun(t, h.nc, small, nil, "")
		lat = append(lat, time.Since(start))
		time.Sleep(20 * time.Millisecond) // the pace of the small starts: spread over the large ones' work
	}
	close(stop)
	slow.Wait()
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("small starts while 10 large ones are in flight: p50 %s, p99 %s, max %s", p50, p99, lat[len(lat)-1])
	if testing.Short() {
		// make test-fast runs several packages at once on the same cores,
		// so a start can wait for other tests' CPU: the short tier checks
		// only what the cure is for (small starts queued behind large ones
		// took about 1 s), on p90 so that one or two starts that lost the
		// CPU do not fail it. make test and make unit check the median
		// too.
		if p90 := lat[len(lat)*9/10]; p90 > 250*time.Millisecond {
			t.Errorf("p90 %s, want within 250 ms", p90)
		}
		return
	}
	// The median within 50 ms, and p90 within 500 ms: queued behind the
	// large ones, most small starts took about 1 s, which fails both. p90
	// alone at 50 ms was decided by moments of CPU lost to the packages
	// make test runs beside this one (50.98 ms once in CI on p99; p90 133
	// ms with p50 4.6 ms once on a clean clone, and 404 ms with p50 43 ms
	// on another, where alone it gives p99 17-38 ms): the median is what
	// tells the cure.
	if p50 > 50*time.Millisecond {
		t.Errorf("p50 %s, want within 50 ms", p50)
	}
	if p90 := lat[len(lat)*9/10]; p90 > 500*time.Millisecond {
		t.Errorf("p90 %s, want within 500 ms", p90)
	}
}
