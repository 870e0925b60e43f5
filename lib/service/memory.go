package service

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Go keeps the memory a burst made it take: the heap is only collected
// when it grows (an idle process allocates nothing, so it is never
// collected again until the two-minute forced collection), pools such as
// nats-server's message-block buffers hold what they had until two
// collections have passed, and the scavenger returns free pages only down
// to the heap goal (twice the live heap) or the memory limit. A server
// that took 220 MB for a burst of 10,000 runs then sits at 220 MB while it
// holds 70 MB. ReleaseIdleMemory gives the rest back once the process has
// gone quiet after work.

// IdleRelease configures ReleaseIdleMemory.
type IdleRelease struct {
	// Tick is how often allocation is sampled (default 1 s).
	Tick time.Duration
	// QuietTicks is the window, in ticks, whose allocation must average
	// under BusyBytes a tick before memory is released (default 12:
	// nats-server drops a message block's cache 10 s after its last use,
	// and a release before that would leave those buffers held; a release
	// is two collections, a pause of ~100 ms of CPU that work arriving then
	// waits behind, so it waits for a real lull, not a gap between two
	// bursts). An average, not every tick: a process at rest still does
	// small periodic work (the runner's sweep of its waiting runs every
	// 15 s), and a rule of every tick under the limit missed the lull
	// whenever two such jobs fell within the window.
	QuietTicks int
	// BusyBytes is the allocation a tick, on average over the window,
	// that counts as work (default 1 MiB).
	BusyBytes uint64
	// MinHeld is how much heap memory the process must hold from the OS
	// for a release to be worth it (default 32 MiB). What is live is not
	// known without a collection: an idle process has not had one since
	// its burst, so the last one's figure still counts the burst's garbage.
	MinHeld uint64
}

func (c *IdleRelease) defaults() {
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.QuietTicks <= 0 {
		c.QuietTicks = 12
	}
	if c.BusyBytes == 0 {
		c.BusyBytes = 1 << 20
	}
	if c.MinHeld == 0 {
		c.MinHeld = 32 << 20
	}
}

// idleGate decides when to release: once per quiet period that follows
// work, never while work goes on. Work is a window of QuietTicks ticks
// allocating BusyBytes a tick or more on average; quiet is a full window
// under that. It is the decision alone (no clock, no runtime), so it is
// tested as such.
type idleGate struct {
	cfg    IdleRelease
	window []uint64 // the last QuietTicks ticks' allocation, a ring
	next   int      // where the next tick goes in window
	seen   int      // ticks seen, up to QuietTicks
	sum    uint64   // of window
	armed  bool     // work happened since the last release
}

// observe takes one tick's allocation and the heap memory held and says
// whether to release now.
func (g *idleGate) observe(allocated, held uint64) bool {
	if g.window == nil {
		g.window = make([]uint64, g.cfg.QuietTicks)
	}
	g.sum -= g.window[g.next]
	g.window[g.next] = allocated
	g.sum += allocated
	g.next = (g.next + 1) % len(g.window)
	g.seen = min(g.seen+1, len(g.window))
	budget := g.cfg.BusyBytes * uint64(len(g.window))
	if g.sum >= budget {
		g.armed = true
		return false
	}
	if !g.armed || g.seen < len(g.window) || held < g.cfg.MinHeld {
		return false
	}
	g.armed = false
	return true
}

// memSample is what the gate needs from the runtime.
type memSample struct {
	allocs   uint64 // bytes allocated since the process started
	mapped   uint64 // heap memory held from the OS, not released
	liveHeap uint64 // live heap as of the last collection
}

var memSampleNames = []string{"/gc/heap/allocs:bytes", "/memory/classes/total:bytes", "/memory/classes/heap/released:bytes", "/gc/heap/live:bytes"}

func readMemSample(s []metrics.Sample) memSample {
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return memSample{allocs: v(0), mapped: v(1) - min(v(2), v(1)), liveHeap: v(3)}
}

// ReleaseIdleMemory runs until ctx ends: each time the process goes quiet
// after work it collects twice (the second frees what pools let go of in
// the first) and returns free memory to the operating system. One release
// costs two collections of the live heap, once per burst. Call it once
// per process.
func ReleaseIdleMemory(ctx context.Context, log *slog.Logger, cfg IdleRelease) {
	cfg.defaults()
	if log == nil {
		log = slog.Default()
	}
	samples := make([]metrics.Sample, len(memSampleNames))
	for i, n := range memSampleNames {
		samples[i].Name = n
	}
	gate := &idleGate{cfg: cfg}
	last := readMemSample(samples)
	t := time.NewTicker(cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := readMemSample(samples)
		if gate.observe(now.allocs-last.allocs, now.mapped) {
			start := time.Now()
			runtime.GC()
			debug.FreeOSMemory()
			after := readMemSample(samples)
			log.Debug("released idle memory to the OS", "held_before_mb", now.mapped>>20, "held_after_mb", after.mapped>>20, "live_mb", after.liveHeap>>20, "took", time.Since(start))
			now = after
		}
		last = now
	}
}
