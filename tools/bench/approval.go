package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The approval workload runs against `heed up` as a separate process (the
// bench is only its client, as an agent or a channel would be), so the
// figures include the wire between them and the RSS is heed's alone.

// Targets of the approval workload (issue 12).
const (
	targetAnswerRate = 2000.0                // approvals/s, 50 callers
	targetAnswerP99  = 50 * time.Millisecond // one answer command, 50 callers
	targetRoundTrip  = 5 * time.Millisecond  // answer → run resumed, seen by the requester
	targetOpenRate   = 2000.0                // waiting runs opened/s
	// restSettle is how long heed is left quiet before its RSS at rest is
	// read: nats-server drops a message block's cache 10 s after its last
	// use, and heed gives free memory back to the OS after 12 s without
	// work (lib/service ReleaseIdleMemory).
	restSettle        = 20 * time.Second
	targetPendingRSS  = 150e6 // bytes of heed + its embedded server, 10,000 pending
	approvalCallers   = 50
	approvalSkillName = "bench_approval"
)

// approvalSkill pauses at a confirmation for a person, then computes
// something cheap: opening it is a start, a run.started and a pause; an
// approval is an answer, a resume and a completion.
func approvalSkill() string {
	return `name: ` + approvalSkillName + `
inputs:
  n: {type: integer, default: 0}
steps:
  - name: approve
    confirm:
      message: "Approve bench run {{ inputs.n }}?"
      options:
        - {label: Approve, value: proceed}
        - {label: Reject, value: cancel}
      default: cancel
      timeout: 3600
    output: decision
  - name: done
    compute: inputs.n + 1
    output: result
`
}

// upProcess is `heed up` running as a child process.
type upProcess struct {
	cmd  *exec.Cmd
	url  string
	dir  string
	done chan error
}

// heedBinary is -heed, else bin/heed next to this program (make build puts
// both there).
func heedBinary(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(self), "heed")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no heed binary next to heed-bench (%s): run make build, or pass -heed", p)
	}
	return p, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startUp starts `heed up` on a fresh data directory and a free port and
// waits until it says it is ready.
func startUp(ctx context.Context, env *benchEnv) (*upProcess, error) {
	bin, err := heedBinary(env.cfg.heedBin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(env.cfg.dir, "heed-bench-up-*")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"up", "--data", dir, "--nats-listen", listen, "--log-level", "warn"}
	if env.cfg.upPprof != "" {
		args = append(args, "--pprof-listen", env.cfg.upPprof)
	}
	args = append(args, strings.Fields(env.cfg.upArgs)...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HEED_NATS_URL=") // the embedded server, whatever the caller's environment says
	cmd.Stderr = env.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	env.logf("starting %s %s", bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &upProcess{cmd: cmd, url: "nats://" + listen, dir: dir, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			env.logf("  heed up: %s", line)
			if !seen && strings.Contains(line, "heed: ready") {
				seen = true
				close(ready)
			}
		}
		p.done <- cmd.Wait()
	}()
	select {
	case <-ready:
		return p, nil
	case err := <-p.done:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("heed up exited before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, errors.New("heed up was not ready within 60 s")
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
}

// stop sends SIGTERM (heed drains and stops), kills after 30 s, and
// removes the data.
func (p *upProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	os.RemoveAll(p.dir)
}

// cpu is the CPU time the process has used (user and system), from
// /proc/<pid>/stat.
func (p *upProcess) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15, in clock ticks of
// 1/100 s, Linux's USER_HZ) from a /proc/<pid>/stat line; the command
// name before them is in parentheses and may hold spaces.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name in %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // from field 3 (state) on
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// memory reads VmRSS and VmHWM (peak RSS) of the process, in bytes.
func (p *upProcess) memory() (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v) // "12345 kB"
		if len(f) < 1 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = n * 1024
		} else {
			peak = n * 1024
		}
	}
	return rss, peak, nil
}

// approvalClient is the bench's side: it starts runs, learns from the
// log's live subjects when each pauses and resumes, and answers.
type approvalClient struct {
	nc    *nats.Conn
	codec *events.Codec
	subs  []*nats.Subscription

	mu      sync.Mutex
	paused  map[string]string // run → confirmation
	waitFor map[string]chan time.Time
	resumed map[string]chan time.Time
}

func newApprovalClient(env *benchEnv, url string) (*approvalClient, error) {
	nc, err := nats.Connect(url, nats.Name("heed-bench-approval"))
	if err != nil {
		return nil, err
	}
	c := &approvalClient{nc: nc, codec: env.codec, paused: map[string]string{}, waitFor: map[string]chan time.Time{}, resumed: map[string]chan time.Time{}}
	// The requester watches its runs as any client can: a subscription on
	// the events' subjects (the stream stores them; this sees them live).
	sub, err := nc.Subscribe("heed.run.*.paused", c.onPaused)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.subs = append(c.subs, sub)
	sub, err = nc.Subscribe("heed.run.*.resumed", c.onResumed)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.subs = append(c.subs, sub)
	for _, s := range c.subs {
		_ = s.SetPendingLimits(-1, -1)
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *approvalClient) close() { c.nc.Close() }

func (c *approvalClient) onPaused(m *nats.Msg) {
	now := time.Now()
	ev, err := c.codec.Decode(m)
	if err != nil {
		return
	}
	var d events.RunPausedData
	if json.Unmarshal(ev.Data(), &d) != nil || d.ConfirmID == "" {
		return
	}
	c.mu.Lock()
	c.paused[ev.Subject()] = d.ConfirmID
	ch := c.waitFor[ev.Subject()]
	delete(c.waitFor, ev.Subject())
	c.mu.Unlock()
	if ch != nil {
		ch <- now
	}
}

func (c *approvalClient) onResumed(m *nats.Msg) {
	now := time.Now()
	run := strings.Split(m.Subject, ".")[2]
	c.mu.Lock()
	ch := c.resumed[run]
	delete(c.resumed, run)
	c.mu.Unlock()
	if ch != nil {
		ch <- now
	}
}

// open starts n runs of the approval skill with approvalCallers callers
// and waits until every one has paused at its confirmation. It returns
// the runs and their confirmations, and how long it took from the first
// start to the last pause.
func (c *approvalClient) open(ctx context.Context, tag string, n int) (runs, confirms []string, elapsed time.Duration, err error) {
	skill := approvalSkill()
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	pausedAt := make(chan time.Time, n)
	next := make(chan int)
	t0 := time.Now()
	for range approvalCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var rep command.RunReply
				req := command.StartRun{Skill: command.SkillSource{Source: skill}, Inputs: map[string]any{"n": i}, RequestedBy: "bench", RequestID: fmt.Sprintf("%s-%d", tag, i)}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := command.Call(cctx, c.nc, command.RunStart, req, &rep)
				cancel()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("start %s-%d: %w", tag, i, err)
				}
				if err == nil {
					// Register before the pause can be missed: it may have
					// come already.
					c.mu.Lock()
					if _, ok := c.paused[rep.RunID]; ok {
						pausedAt <- time.Now()
					} else {
						ch := make(chan time.Time, 1)
						c.waitFor[rep.RunID] = ch
						go func() {
							select {
							case t := <-ch:
								pausedAt <- t
							case <-ctx.Done():
							}
						}()
					}
					c.mu.Unlock()
					runs = append(runs, rep.RunID)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, nil, 0, firstErr
	}
	var last time.Time
	timeout := time.After(2 * time.Minute)
	for got := 0; got < n; got++ {
		select {
		case t := <-pausedAt:
			if t.After(last) {
				last = t
			}
		case <-timeout:
			return nil, nil, 0, fmt.Errorf("%s: %d of %d runs paused within 2 minutes", tag, got, n)
		case <-ctx.Done():
			return nil, nil, 0, ctx.Err()
		}
	}
	c.mu.Lock()
	for _, r := range runs {
		confirms = append(confirms, c.paused[r])
	}
	c.mu.Unlock()
	return runs, confirms, last.Sub(t0), nil
}

// answer approves one confirmation as a person would
// (heed.cmd.confirm.answer).
func (c *approvalClient) answer(ctx context.Context, id string) error {
	var rep command.AnswerReply
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return command.Call(cctx, c.nc, command.ConfirmAnswer, command.AnswerConfirmation{ID: id, Choice: "proceed", By: "bench", Channel: "bench"}, &rep)
}

// answerAll answers every confirmation with approvalCallers callers; it
// returns each answer command's latency (sorted) and the elapsed time.
func (c *approvalClient) answerAll(ctx context.Context, confirms []string) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	next := make(chan string)
	t0 := time.Now()
	for range approvalCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				s := time.Now()
				err := c.answer(ctx, id)
				d := time.Since(s)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("answer %s: %w", id, err)
				}
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	for _, id := range confirms {
		next <- id
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(t0)
	if firstErr != nil {
		return nil, 0, firstErr
	}
	slices.Sort(lat)
	return lat, elapsed, nil
}

// roundTrip answers one confirmation at a time and measures until the
// requester's subscription sees the run resumed. It also returns when
// each one's answer command replied and when it was seen, to break the
// round trip down by hop (breakdown).
func (c *approvalClient) roundTrip(ctx context.Context, runs, confirms []string) ([]time.Duration, []tripTimes, error) {
	var out []time.Duration
	var times []tripTimes
	for i, run := range runs {
		ch := make(chan time.Time, 1)
		c.mu.Lock()
		c.resumed[run] = ch
		c.mu.Unlock()
		t0 := time.Now()
		if err := c.answer(ctx, confirms[i]); err != nil {
			return nil, nil, err
		}
		replied := time.Now()
		select {
		case t := <-ch:
			out = append(out, t.Sub(t0))
			times = append(times, tripTimes{run: run, confirm: confirms[i], sent: t0, replied: replied, seen: t})
		case <-time.After(10 * time.Second):
			return nil, nil, fmt.Errorf("run %s: not resumed within 10 s of its answer", run)
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	slices.Sort(out)
	return out, times, nil
}

// tripTimes is one round trip as the client saw it.
type tripTimes struct {
	run, confirm               string
	sent, replied, seen        time.Time
	answerStored, resumeStored time.Time // the stream's timestamps, read after
}

// breakdown splits round trips by hop with the stream's own timestamps
// (the server runs on this machine, so its clock is the bench's): the
// answer command until its event is stored (the router), from there until
// the run's resumed event is stored (the runner), and from there until the
// requester's subscription sees it (delivery); and the answer command's
// reply. It reports the p50 and p99 of each, and which hop the slowest
// twentieth of the round trips spent most in.
func breakdown(ctx context.Context, nc *nats.Conn, trips []tripTimes) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return "", err
	}
	for i := range trips {
		a, err := s.GetLastMsgForSubject(ctx, events.ConfirmAnswered.Subject(trips[i].confirm))
		if err != nil {
			return "", fmt.Errorf("answer of %s: %w", trips[i].confirm, err)
		}
		r, err := s.GetLastMsgForSubject(ctx, events.RunResumed.Subject(trips[i].run))
		if err != nil {
			return "", fmt.Errorf("resume of %s: %w", trips[i].run, err)
		}
		trips[i].answerStored, trips[i].resumeStored = a.Time, r.Time
	}
	hops := []struct {
		name string
		of   func(t tripTimes) time.Duration
	}{
		{"answer stored (router)", func(t tripTimes) time.Duration { return t.answerStored.Sub(t.sent) }},
		{"resume stored (runner)", func(t tripTimes) time.Duration { return t.resumeStored.Sub(t.answerStored) }},
		{"seen after stored (core NATS: may be negative)", func(t tripTimes) time.Duration { return t.seen.Sub(t.resumeStored) }},
		{"answer command's reply", func(t tripTimes) time.Duration { return t.replied.Sub(t.sent) }},
	}
	var b strings.Builder
	for _, h := range hops {
		var d []time.Duration
		for _, t := range trips {
			d = append(d, h.of(t))
		}
		slices.Sort(d)
		fmt.Fprintf(&b, "%s p50 %s p99 %s; ", h.name, micros(percentile(d, 50)), micros(percentile(d, 99)))
	}
	slowest := slices.Clone(trips)
	slices.SortFunc(slowest, func(x, y tripTimes) int { return cmp.Compare(y.seen.Sub(y.sent), x.seen.Sub(x.sent)) })
	slowest = slowest[:max(len(slowest)/20, 1)]
	most := map[string]int{}
	for _, t := range slowest {
		best, bestD := "", time.Duration(-1)
		for _, h := range hops[:3] {
			if d := h.of(t); d > bestD {
				best, bestD = h.name, d
			}
		}
		most[best]++
	}
	fmt.Fprintf(&b, "the slowest %d spent most in:", len(slowest))
	for _, h := range hops[:3] {
		fmt.Fprintf(&b, " %s %d", h.name, most[h.name])
	}
	return b.String(), nil
}

// writeTrips writes each round trip as a CSV line: when its answer was
// sent (Unix µs), the whole trip and each hop (µs).
func writeTrips(path string, trips []tripTimes) error {
	var b strings.Builder
	b.WriteString("sent_unix_us,trip_us,router_us,runner_us,seen_after_stored_us,reply_us\n")
	us := func(d time.Duration) int64 { return d.Microseconds() }
	for _, t := range trips {
		fmt.Fprintf(&b, "%d,%d,%d,%d,%d,%d\n", t.sent.UnixMicro(), us(t.seen.Sub(t.sent)), us(t.answerStored.Sub(t.sent)), us(t.resumeStored.Sub(t.answerStored)), us(t.seen.Sub(t.resumeStored)), us(t.replied.Sub(t.sent)))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// waitSchedules waits until the stream holds at least n confirmation
// deadlines: the confirm router has taken every pending question in.
func waitSchedules(ctx context.Context, nc *nats.Conn, n int) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("heed.schedule.confirm.>"))
		if err == nil && len(info.State.Subjects) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			got := 0
			if info != nil {
				got = len(info.State.Subjects)
			}
			return fmt.Errorf("%d of %d confirmation deadlines scheduled within 2 minutes", got, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runApproval is the approval workload against `heed up` in a child
// process: open 1,000 waiting runs, answer them with 50 callers, measure
// single approvals end to end, then hold 10,000 pending and read heed's RSS.
func runApproval(ctx context.Context, env *benchEnv) (*result, error) {
	// With -approval-url the deployment is someone else's (a cluster,
	// services as separate processes): no process of ours to read the
	// memory of.
	url := env.cfg.approvalURL
	var up *upProcess
	memory := func() (int64, int64, error) { return 0, 0, nil }
	cpu := func() (time.Duration, error) { return 0, nil }
	if url == "" {
		var err error
		if up, err = startUp(ctx, env); err != nil {
			return nil, err
		}
		defer up.stop()
		url, memory, cpu = up.url, up.memory, up.cpu
	}
	c, err := newApprovalClient(env, url)
	if err != nil {
		return nil, err
	}
	defer c.close()
	rss0, _, err := memory()
	if err != nil {
		return nil, err
	}

	// Warm up: the first runs pay for connections, consumers and caches.
	env.logf("approval: warm-up (200 runs opened and approved)")
	_, wc, _, err := c.open(ctx, "warm", 200)
	if err != nil {
		return nil, err
	}
	if _, _, err := c.answerAll(ctx, wc); err != nil {
		return nil, err
	}

	// Each phase starts with heed at rest: every consumer caught up.
	var settled []string
	rest := func(phase string) error {
		d, ok, err := settle(ctx, c.nc, 2*time.Minute)
		if err != nil {
			return err
		}
		note := fmt.Sprintf("%s: consumers caught up in %s", phase, d.Round(100*time.Millisecond))
		if !ok {
			note = fmt.Sprintf("%s: consumers still behind after %s; measured anyway", phase, d.Round(time.Second))
		}
		env.logf("approval: %s", note)
		settled = append(settled, note)
		return nil
	}
	if err := rest("before opening"); err != nil {
		return nil, err
	}
	n := env.cfg.approvals
	env.logf("approval: opening %d waiting runs with %d callers", n, approvalCallers)
	cpu0, err := cpu()
	if err != nil {
		return nil, err
	}
	_, confirms, openElapsed, err := c.open(ctx, "open", n)
	if err != nil {
		return nil, err
	}
	openRate := float64(n) / openElapsed.Seconds()
	if err := rest("before answering"); err != nil {
		return nil, err
	}
	cpu1, err := cpu()
	if err != nil {
		return nil, err
	}
	openCPU := cpu1 - cpu0

	env.logf("approval: answering %d pending approvals with %d callers", n, approvalCallers)
	ansLat, ansElapsed, err := c.answerAll(ctx, confirms)
	if err != nil {
		return nil, err
	}
	ansRate := float64(n) / ansElapsed.Seconds()

	rtN := env.cfg.roundTrips
	env.logf("approval: %d single approvals, one at a time", rtN)
	rtRuns, rtConfirms, _, err := c.open(ctx, "rt", rtN+20)
	if err != nil {
		return nil, err
	}
	if err := rest("before the round trips"); err != nil {
		return nil, err
	}
	// The same server's raw JetStream, one publish at a time, heed at rest
	// as for the round trips: the machine's speed in this run, to read the
	// round trip against (this box's speed varies by a third within hours:
	// BENCHMARKS.md).
	raw, err := rawPublishLatencies(ctx, c.nc, rtN)
	if err != nil {
		return nil, err
	}
	if _, _, err := c.roundTrip(ctx, rtRuns[:20], rtConfirms[:20]); err != nil { // warm-up
		return nil, err
	}
	stopTraces, err := startTraces(ctx, env.cfg, rtN)
	if err != nil {
		return nil, err
	}
	rt, trips, err := c.roundTrip(ctx, rtRuns[20:], rtConfirms[20:])
	if terr := stopTraces(); terr != nil {
		env.logf("approval: trace: %v", terr)
	}
	if err != nil {
		return nil, err
	}
	split, err := breakdown(ctx, c.nc, trips)
	if err != nil {
		env.logf("approval: round trip breakdown: %v", err)
		split = "—"
	} else if env.cfg.tripsOut != "" {
		if err := writeTrips(env.cfg.tripsOut, trips); err != nil {
			return nil, err
		}
	}

	if err := rest(fmt.Sprintf("before the %s", thousands(int64(env.cfg.pending)))); err != nil {
		return nil, err
	}
	pend := env.cfg.pending
	env.logf("approval: opening %d waiting runs and holding them", pend)
	cpu2, err := cpu()
	if err != nil {
		return nil, err
	}
	_, _, pendElapsed, err := c.open(ctx, "pend", pend)
	if err != nil {
		return nil, err
	}
	if err := waitSchedules(ctx, c.nc, pend); err != nil {
		return nil, err
	}
	// Let heed's GC run over the burst before reading its footprint.
	time.Sleep(2 * time.Second)
	rss, peak, err := memory()
	if err != nil {
		return nil, err
	}
	// The same, once heed is at rest: the figure above still holds what
	// the burst of opening left (nats-server keeps a message block's
	// cache 10 s after its last use, and the consumers that fold the
	// burst are still reading it).
	if err := rest(fmt.Sprintf("after the %s", thousands(int64(pend)))); err != nil {
		return nil, err
	}
	cpu3, err := cpu()
	if err != nil {
		return nil, err
	}
	pendCPU := cpu3 - cpu2
	time.Sleep(restSettle)
	rssRest, _, err := memory()
	if err != nil {
		return nil, err
	}
	// The heap profile is of heed at rest, what the target is about (its
	// fetch collects garbage first: read the RSS before).
	if env.cfg.upHeap != "" {
		if err := fetchHeap(ctx, env.cfg.upPprof, env.cfg.upHeap); err != nil {
			env.logf("approval: heap profile: %v", err)
		}
	}

	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	verdicts := []bool{
		ansRate >= targetAnswerRate,
		percentile(ansLat, 99) <= targetAnswerP99,
		percentile(rt, 99) <= targetRoundTrip,
		openRate >= targetOpenRate,
		float64(rssRest) <= targetPendingRSS, // held: once the burst that opened them is over
	}
	where := "`heed up` in a separate process"
	if up == nil {
		where = "the heed at " + url + " (services as separate processes)"
	}
	res := &result{tables: []table{{
		caption: fmt.Sprintf("Approvals against %s (bench = the client; %d concurrent callers)", where, approvalCallers),
		columns: []string{"measure", "value", "target", "verdict"},
		rows: [][]string{
			{fmt.Sprintf("open %s waiting runs (start → paused at the confirm step)", thousands(int64(n))), fmt.Sprintf("%s runs/s (%s)", thousands(int64(openRate)), openElapsed.Round(time.Millisecond)), "≥ 2,000/s", passMiss(verdicts[3])},
			{fmt.Sprintf("answer %s pending approvals", thousands(int64(n))), fmt.Sprintf("%s approvals/s (%s)", thousands(int64(ansRate)), ansElapsed.Round(time.Millisecond)), "≥ 2,000/s", passMiss(verdicts[0])},
			{"… one answer command, p50", micros(percentile(ansLat, 50)), "", ""},
			{"… one answer command, p99", micros(percentile(ansLat, 99)), "≤ 50 ms", passMiss(verdicts[1])},
			{fmt.Sprintf("single approval round trip, p50 (%d, one at a time)", len(rt)), micros(percentile(rt, 50)), "", ""},
			{"single approval round trip, p99 (answer → requester sees the run resumed)", micros(percentile(rt, 99)), "≤ 5 ms", passMiss(verdicts[2])},
			{fmt.Sprintf("… raw JetStream on the same server, one publish → ack, p50 / p99 (%d, one at a time)", len(raw)), micros(percentile(raw, 50)) + " / " + micros(percentile(raw, 99)), "", ""},
			{"… by hop (stream timestamps)", split, "", ""},
			{"… round trip against one raw publish, p50 / p99", fmt.Sprintf("%.1f× / %.1f×", ratio(percentile(rt, 50), percentile(raw, 50)), ratio(percentile(rt, 99), percentile(raw, 99))), "", ""},
			{fmt.Sprintf("open %s more waiting runs", thousands(int64(pend))), fmt.Sprintf("%s runs/s (%s)", thousands(int64(float64(pend)/pendElapsed.Seconds())), pendElapsed.Round(time.Millisecond)), "", ""},
			{fmt.Sprintf("heed RSS holding %s confirmations pending, at rest (VmRSS; consumers caught up, then %s)", thousands(int64(pend)), restSettle), mb(rssRest), "≤ 150 MB", passMiss(verdicts[4])},
			{"… RSS 2 s after opening them (the projections still folding the burst)", mb(rss), "", ""},
			{"… peak RSS of the whole run (VmHWM)", mb(peak), "", ""},
			{"… RSS when ready, before any run", mb(rss0), "", ""},
			{fmt.Sprintf("heed up's CPU for opening the %s, until every consumer caught up", thousands(int64(n))), cpuPer(openCPU, n), "", ""},
			{fmt.Sprintf("heed up's CPU for opening the %s more, until every consumer caught up", thousands(int64(pend))), cpuPer(pendCPU, pend), "", ""},
		},
	}}}
	if up == nil {
		// The memory and CPU rows say nothing about a deployment of
		// several processes: drop them and their verdict.
		res.tables[0].rows = res.tables[0].rows[:len(res.tables[0].rows)-6]
		verdicts = verdicts[:4]
		res.notes = append(res.notes, "Against "+url+" (-approval-url): heed's services are other processes, so there are no RSS figures.")
	}
	res.notes = append(res.notes,
		"heed up runs as a child process (bin/heed, fresh data directory, embedded server on a free loopback port); RSS is that process: heed's services and its embedded nats-server together.",
		"The skill pauses at a confirm step for a person (deadline 1 h), then computes one value. Opening = heed.cmd.run.start until the requester's subscription sees heed.run.<id>.paused; answering = heed.cmd.confirm.answer (method user) until its reply.",
		"Round trip: one answer at a time, from sending heed.cmd.confirm.answer until a plain subscription on heed.run.*.resumed sees the run resume (20 warm up first).",
		"By hop: after the round trips the bench reads the stream's timestamps of each answered and resumed event: the router's hop is from sending the answer until its event is stored, the runner's from there until the resume is stored; the requester's subscription is core NATS, which can see the resume before the stream has stored it.",
		"Raw JetStream: just before the round trips, heed at rest, the bench publishes as many 256-byte messages one at a time (with Nats-Msg-Id) to a scratch file-storage stream on the same server and times each to its ack: the machine's speed in this run, to read the round trip against (the stream is removed after).",
		"Each phase starts with heed at rest (every consumer of HEED_EVENTS caught up, at most 2 min): "+strings.Join(settled, "; ")+".",
		"CPU: user + system time of heed up (services and embedded nats-server; /proc/<pid>/stat) from the start of an opening until every consumer of HEED_EVENTS caught up after it, per run opened: what heed spends, where the latencies above also depend on when it spends it.",
		"200 runs are opened and approved first to warm up. -approvals, -round-trips, -pending change the counts; -up-pprof ADDR gives heed up a pprof listener (go tool pprof http://ADDR/debug/pprof/profile?seconds=20 while it runs).",
	)
	for _, ok := range verdicts {
		res.missed = res.missed || !ok
	}
	return res, nil
}

// cpuPer is CPU time in seconds and per item.
func cpuPer(d time.Duration, n int) string {
	if n <= 0 {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.2f s (%.2f ms a run)", d.Seconds(), float64(d.Microseconds())/1000/float64(n))
}

// startTraces starts the execution traces asked for (-up-trace: heed
// up's, from its pprof listener, for about as long as n round trips
// take; -trace: the bench's own) and returns what ends them.
func startTraces(ctx context.Context, cfg config, n int) (stop func() error, err error) {
	var stops []func() error
	if cfg.selfTrace != "" {
		f, err := os.Create(cfg.selfTrace)
		if err != nil {
			return nil, err
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			return nil, err
		}
		stops = append(stops, func() error { trace.Stop(); return f.Close() })
	}
	if cfg.upTrace != "" {
		if cfg.upPprof == "" {
			return nil, errors.New("-up-trace needs -up-pprof")
		}
		// About 2 ms a round trip; the trace ends on its own.
		secs := max(1, (n*2+999)/1000)
		done := make(chan error, 1)
		go func() {
			done <- fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/trace?seconds=%d", cfg.upPprof, secs), cfg.upTrace)
		}()
		// The trace has begun once the server got the request.
		time.Sleep(100 * time.Millisecond)
		stops = append(stops, func() error { return <-done })
	}
	return func() error {
		var errs []error
		for _, s := range stops {
			errs = append(errs, s())
		}
		return errors.Join(errs...)
	}, nil
}

// fetchTo saves what url serves to path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fetchHeap saves heed up's heap profile (after a GC) from its pprof
// listener: what holds the memory of the pending confirmations.
func fetchHeap(ctx context.Context, addr, path string) error {
	if addr == "" {
		return errors.New("-up-heapprofile needs -up-pprof")
	}
	return fetchTo(ctx, "http://"+addr+"/debug/pprof/heap?gc=1", path)
}

// settle waits until every consumer of the event stream has caught up
// (nothing pending, nothing unacknowledged), so that a phase is measured
// against heed at rest rather than against the projections still folding
// the phase before, and returns how long that took (at most limit).
func settle(ctx context.Context, nc *nats.Conn, limit time.Duration) (time.Duration, bool, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, false, err
	}
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return 0, false, err
	}
	t0 := time.Now()
	for {
		busy := uint64(0)
		lister := s.ListConsumers(ctx)
		for ci := range lister.Info() {
			busy += ci.NumPending + uint64(ci.NumAckPending)
		}
		if err := lister.Err(); err != nil {
			return 0, false, err
		}
		if busy == 0 {
			return time.Since(t0), true, nil
		}
		if time.Since(t0) > limit {
			return time.Since(t0), false, nil
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rawPublishLatencies publishes n messages of 256 bytes, one at a time, to
// a scratch file-storage stream on the server nc is connected to and
// returns each publish's time to its ack, sorted; the stream is removed.
func rawPublishLatencies(ctx context.Context, nc *nats.Conn, n int) ([]time.Duration, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	const name = "HEED_BENCH_RAW"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"heedbench.raw.>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute}); err != nil {
		return nil, fmt.Errorf("raw baseline stream: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	payload := make([]byte, 256)
	out := make([]time.Duration, 0, n)
	for i := range n + 20 { // the first 20 warm up
		msg := &nats.Msg{Subject: fmt.Sprintf("heedbench.raw.%d", i%64), Header: nats.Header{"Nats-Msg-Id": []string{fmt.Sprintf("raw-%d", i)}}, Data: payload}
		start := time.Now()
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return nil, fmt.Errorf("raw baseline publish: %w", err)
		}
		if i >= 20 {
			out = append(out, time.Since(start))
		}
	}
	slices.Sort(out)
	return out, nil
}

// ratio is a / b, 0 when b is 0.
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
