package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The chaos test: heed (every service in one process) against an external
// nats-server, while runs go on: kill -9 of heed, kill -9 of the NATS
// server, racing answers, a deadline across both. It fails on any lost,
// stuck, doubled or overlapping step. CI runs one trial of 100 runs;
// `make chaos` runs HEED_CHAOS_TRIALS trials of HEED_CHAOS_RUNS runs and
// prints the report.

// natsServer is an external nats-server process with JetStream.
type natsServer struct {
	t    *testing.T
	cmd  *exec.Cmd
	port int
	dir  string
	out  syncBuffer
	done chan struct{}
}

func startNATS(t *testing.T, port int, dir string) *natsServer {
	t.Helper()
	s := &natsServer{t: t, port: port, dir: dir, done: make(chan struct{})}
	// As deploy/nats/standalone.conf: every message written and fsynced
	// before it is acknowledged, so a kill -9 loses nothing acknowledged.
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\nserver_name: chaos\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n", port, filepath.Join(dir, "js"))), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(natsServerBin, "-c", conf)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("--- nats-server (port %d) ---\n%s", port, lastLines(s.out.String(), 40))
		}
	})
	checkFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return c.Close()
	})
	return s
}

func (s *natsServer) kill() {
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
}

// startHeedOn runs `heed up` with every service against the server at url,
// with the sweep made quick.
func startHeedOn(t *testing.T, url, tools string) *heed {
	t.Helper()
	h := &heed{t: t, url: url, done: make(chan struct{})}
	h.cmd = exec.Command(heedBin, "up", "--nats-url", url, "--tools", tools, "--sweep-every", "1s", "--sweep-quiet", "2s")
	h.cmd.Dir = repoRoot
	h.cmd.Env = childEnv(t.TempDir())
	h.cmd.Stdout, h.cmd.Stderr = &h.stdout, &h.stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("start heed up: %v", err)
	}
	go func() { _ = h.cmd.Wait(); close(h.done) }()
	t.Cleanup(h.stop)
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-h.done:
			t.Fatalf("heed up exited (%v) before it was ready:\n%s", h.cmd.ProcessState, h.stderr.String())
		default:
		}
		if !strings.Contains(h.stdout.String(), "heed: ready") {
			return errors.New("not ready")
		}
		return nil
	})
	return h
}

// chaosTool does some work under a lock named by its idempotency key: if
// another live process holds the same key, it reports an overlap. It
// records each start and each end. A lock left by a killed call names its
// process by pid and start time: pids come round again (pid_max is 32,768
// on many machines and a chaos run starts tens of thousands of
// processes), and a pid alone would take a stranger for a live copy. A
// zombie is not a live copy: a call killed with its runner (the kernel's
// SIGKILL, Pdeathsig) stays one until the process that inherits it reaps
// it, which in a container may take a while.
const chaosTool = `#!/bin/sh
key=$(printf %s "$HEED_IDEMPOTENCY_KEY" | tr '/' '_')
lock="$CHAOS_DIR/locks/$key"
me="$$ $(cut -d' ' -f22 /proc/$$/stat)"
if ! mkdir "$lock" 2>/dev/null; then
  old=$(cat "$lock/pid" 2>/dev/null)
  pid=${old%% *}
  if [ -n "$pid" ] && [ "$pid $(cut -d' ' -f22 /proc/$pid/stat 2>/dev/null)" = "$old" ] && [ "$(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null)" != Z ]; then echo "overlap $HEED_IDEMPOTENCY_KEY $pid $$ $(date +%T.%N) parent $PPID" >> "$CHAOS_DIR/calls"; fi
fi
echo "$me" > "$lock/pid"
echo "start $HEED_IDEMPOTENCY_KEY $$ $(date +%T.%N) parent $PPID" >> "$CHAOS_DIR/calls"
sleep 0.2
# The side effect, idempotent by its key (as a tool that honours
# HEED_IDEMPOTENCY_KEY does): a key already in the ledger is not added.
if ! grep -qxF "$HEED_IDEMPOTENCY_KEY" "$CHAOS_DIR/ledger" 2>/dev/null; then echo "$HEED_IDEMPOTENCY_KEY" >> "$CHAOS_DIR/ledger"; fi
echo "end $HEED_IDEMPOTENCY_KEY $$ $(date +%T.%N)" >> "$CHAOS_DIR/calls"
rm -rf "$lock"
echo '{"ok":true}'
`

const chaosSkill = `name: chaos
steps:
  - name: first
    tool: chaos_work
  - name: approve
    confirm:
      message: "go on?"
      options: [{label: Go, value: proceed}, {label: Stop, value: cancel}]
      default: cancel
      timeout: 600
  - name: second
    tool: chaos_work
`

type chaosReport struct {
	runs, completed, cancelled, failed, stuck int
	toolStarts, toolEnds, rerunKeys, overlaps int
	doubled                                   []string
	answersRefused                            int64
	// The ledger: each completed step's side effect, by its idempotency
	// key; lost is a completed step without one, twice a key written more
	// than once.
	effects, lost, twice int
	// resumedTwice: runs that resumed from their confirmation more than
	// once (two answers took effect).
	resumedTwice  int
	deadlineFired int
	replayEqual   string
	kills         []string
	took          time.Duration
}

func (r chaosReport) String() string {
	nodes, services := countKills(r.kills)
	return fmt.Sprintf("runs %d: completed %d, cancelled %d, failed %d, stuck %d; side effects %d, lost %d, done twice %d; tool calls started %d, finished %d, keys called again after a crash %d, overlapping %d; doubled steps %d; runs resumed twice %d; racing answers refused %d; deadline fired %d; kills %d (%d of a node, %d of a service); replay %s; %s",
		r.runs, r.completed, r.cancelled, r.failed, r.stuck, r.effects, r.lost, r.twice, r.toolStarts, r.toolEnds, r.rerunKeys, r.overlaps, len(r.doubled), r.resumedTwice, r.answersRefused, r.deadlineFired,
		len(r.kills), nodes, services, r.replayEqual, r.took.Round(time.Millisecond))
}

// chaosTarget is a deployment of heed the chaos suite loads and breaks.
type chaosTarget interface {
	// clientURL is what a client connects to.
	clientURL() string
	// during is called after run i of n has been started.
	during(t *testing.T, i, n int)
	// settle ends the chaos once every run has been started: every
	// process runs again. It returns what was killed.
	settle(t *testing.T) []string
}

// singleServer is heed up on one nats-server: heed is killed a third of
// the way in, NATS two thirds in, heed once more at the end.
type singleServer struct {
	h          *heed
	srv        *natsServer
	port       int
	store, url string
	tools      string
}

func (s *singleServer) clientURL() string { return s.url }

func (s *singleServer) during(t *testing.T, i, n int) {
	switch i {
	case n / 3: // kill -9 heed while runs go on
		s.h.kill()
		time.Sleep(300 * time.Millisecond) // the chaos: heed stays down a while, runs and answers go on arriving
		s.h = startHeedOn(t, s.url, s.tools)
	case 2 * n / 3: // kill -9 the NATS server
		s.srv.kill()
		time.Sleep(time.Second) // the chaos: NATS stays down a while, every client reconnects
		s.srv = startNATS(t, s.port, s.store)
	}
}

func (s *singleServer) settle(t *testing.T) []string {
	// And heed once more, while runs are mid-step: the chaos picks a
	// moment, whatever the runs are doing then.
	time.Sleep(500 * time.Millisecond)
	s.h.kill()
	s.h = startHeedOn(t, s.url, s.tools) // stopped at cleanup
	return []string{"heed up", "nats", "heed up"}
}

// chaosTools writes the chaos tool and its tools file into work.
func chaosTools(t *testing.T, work string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(work, "locks"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(work, "work.sh")
	if err := os.WriteFile(script, []byte(chaosTool), 0o755); err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(work, "tools.yaml")
	if err := os.WriteFile(tools, []byte(fmt.Sprintf("tools:\n  chaos_work:\n    command: %s\n    timeout: 5s\n    set_env: {CHAOS_DIR: %q}\n", script, work)), 0o644); err != nil {
		t.Fatal(err)
	}
	return tools
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("long tier (kill -9 of heed and NATS during 100 runs, ~1 min): skipped by -short (make test-fast); make test, make unit and make chaos run it")
	}
	runs, trials := 100, 1
	if v, err := strconv.Atoi(os.Getenv("HEED_CHAOS_RUNS")); err == nil && v > 0 {
		runs = v
	}
	if v, err := strconv.Atoi(os.Getenv("HEED_CHAOS_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	for trial := 1; trial <= trials; trial++ {
		t.Run(fmt.Sprintf("trial %d", trial), func(t *testing.T) {
			rep := chaosTrial(t, runs)
			t.Logf("chaos report: %s", rep)
		})
	}
}

func chaosTrial(t *testing.T, runs int) chaosReport {
	work := t.TempDir()
	tools := chaosTools(t, work)
	port := freePort(t)
	s := &singleServer{port: port, url: fmt.Sprintf("nats://127.0.0.1:%d", port), store: t.TempDir(), tools: tools}
	s.srv = startNATS(t, port, s.store)
	s.h = startHeedOn(t, s.url, tools)
	return chaosLoad(t, s, work, runs, 20)
}

// chaosLoad runs the chaos suite's load against target: runs runs of the
// chaos skill (a tool step, a confirmation answered twice at once, a tool
// step), at most inFlight being started at once, while target breaks
// things; then it checks that nothing was lost or done twice.
func chaosLoad(t *testing.T, target chaosTarget, work string, runs, inFlight int) chaosReport {
	url := target.clientURL()
	start := time.Now()

	// The test's connection rides out the server's restart.
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// Answer every confirmation the moment its run pauses, twice at once
	// (a race), retrying through the chaos.
	var refused atomic.Int64
	stopAnswering := make(chan struct{})
	var answering sync.WaitGroup
	// From the stream, not a plain subscription: a pause stored while
	// this connection was reconnecting after the server's kill would be
	// missed by a subscription (its run then waits forever for an answer
	// nobody sends); the ordered consumer picks up after the last pause
	// it saw.
	pauses, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pauseCons, err := pauses.OrderedConsumer(context.Background(), "HEED_EVENTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"heed.run.*.paused"}})
	if err != nil {
		t.Fatal(err)
	}
	answered := map[string]bool{}
	var amu sync.Mutex
	sub, err := pauseCons.Consume(func(m jetstream.Msg) {
		var d struct {
			ConfirmID string `json:"confirm_id"`
		}
		if json.Unmarshal(m.Data(), &d) != nil || d.ConfirmID == "" {
			return
		}
		amu.Lock()
		seen := answered[d.ConfirmID]
		answered[d.ConfirmID] = true
		amu.Unlock()
		if seen {
			return // the consumer was recreated and delivered it again
		}
		for i := range 2 {
			answering.Add(1)
			go func() {
				defer answering.Done()
				for {
					err := request(nc, "heed.cmd.confirm.answer", map[string]any{"id": d.ConfirmID, "choice": "proceed", "by": fmt.Sprintf("user:chaos-%d", i), "channel": "chaos"}, nil)
					var ce *cmdError
					switch {
					case err == nil:
						return
					case errors.As(err, &ce) && ce.Code == "conflict":
						refused.Add(1)
						return
					}
					select {
					case <-stopAnswering:
						return
					case <-time.After(200 * time.Millisecond):
					}
				}
			}()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()

	// A question nobody answers, whose deadline falls during the chaos.
	// (Retried, as everything here: a service may be starting or killed.)
	var deadlineReply map[string]any
	checkFor(t, 60*time.Second, 200*time.Millisecond, func() error {
		return request(nc, "heed.cmd.confirm.request", map[string]any{"id": "chaos-deadline", "message": "nobody answers", "options": []map[string]string{{"label": "Go", "value": "proceed"}, {"label": "Stop", "value": "cancel"}}, "default": "cancel", "timeout_s": 4, "requester": "chaos"}, &deadlineReply)
	})

	// Start the runs, at most inFlight at once, retrying through the chaos.
	ids := make([]string, runs)
	var starting sync.WaitGroup
	slots := make(chan struct{}, inFlight)
	for i := range runs {
		starting.Add(1)
		slots <- struct{}{}
		go func() {
			defer starting.Done()
			defer func() { <-slots }()
			for attempt := 0; ; attempt++ {
				var rep runReply
				err := request(nc, "heed.cmd.run.start", map[string]any{"skill": map[string]any{"source": chaosSkill}, "requested_by": "chaos", "request_id": fmt.Sprintf("chaos-%d", i)}, &rep)
				if err == nil {
					ids[i] = rep.RunID
					return
				}
				if attempt > 300 {
					t.Errorf("run %d never started: %v", i, err)
					return
				}
				time.Sleep(100 * time.Millisecond) // the client's retry pace while heed or NATS is down
			}
		}()
		target.during(t, i, runs)
	}
	starting.Wait()
	kills := target.settle(t)

	// Every run ends, as completed.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rep := chaosReport{runs: runs, kills: kills}
	deadline := time.Now().Add(time.Duration(120+runs/10) * time.Second)
	for {
		rep.completed, rep.cancelled, rep.failed = 0, 0, 0
		for _, id := range ids {
			if id == "" {
				continue
			}
			switch status := runStatus(t, js, id); status {
			case "completed":
				rep.completed++
			case "cancelled":
				rep.cancelled++
			case "failed":
				rep.failed++
			}
		}
		if rep.completed+rep.cancelled+rep.failed == runs || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond) // poll: reading every run's status costs a request each
	}
	close(stopAnswering)
	answering.Wait()
	rep.stuck = runs - rep.completed - rep.cancelled - rep.failed
	rep.answersRefused = refused.Load()
	rep.took = time.Since(start)

	// The tool's own record: no two live copies of one call, ever.
	calls, _ := os.ReadFile(filepath.Join(work, "calls"))
	ended := map[string]int{}
	started := map[string]int{}
	var overlapKeys []string
	for _, line := range strings.Split(string(calls), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "start":
			rep.toolStarts++
			started[f[1]]++
		case "end":
			rep.toolEnds++
			ended[f[1]]++
		case "overlap":
			rep.overlaps++
			overlapKeys = append(overlapKeys, f[1])
		}
	}
	for _, n := range started {
		if n > 1 {
			rep.rerunKeys++
		}
	}
	// The log's record: one outcome per step attempt, one completed attempt
	// per step.
	for _, id := range ids {
		if id == "" {
			continue
		}
		done := map[string]int{}
		for _, e := range streamMsgs(t, js, "heed.run."+id+".step.completed") {
			var d struct {
				Index   int `json:"index"`
				Attempt int `json:"attempt"`
			}
			e.decode(t, &d)
			done[strconv.Itoa(d.Index)]++
		}
		for step, n := range done {
			if n > 1 {
				rep.doubled = append(rep.doubled, fmt.Sprintf("%s step %s completed %d times", id, step, n))
			}
		}
	}
	// The ledger: each completed step's side effect exactly once.
	ledger, _ := os.ReadFile(filepath.Join(work, "ledger"))
	written := map[string]int{}
	for _, key := range strings.Fields(string(ledger)) {
		written[key]++
		rep.effects++
	}
	for key, n := range written {
		if n > 1 {
			rep.twice++
			rep.doubled = append(rep.doubled, fmt.Sprintf("side effect %s written %d times", key, n))
		}
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		for _, e := range streamMsgs(t, js, "heed.run."+id+".step.completed") {
			var d struct {
				Index   int `json:"index"`
				Attempt int `json:"attempt"`
			}
			e.decode(t, &d)
			if key := fmt.Sprintf("%s/%d/%d", id, d.Index, d.Attempt); written[key] == 0 && d.Index != 1 {
				rep.lost++
			}
		}
		if n := len(streamMsgs(t, js, "heed.run."+id+".resumed")); n > 1 {
			rep.resumedTwice++
		}
	}
	// The deadline fired once, across both restarts.
	timeouts := 0
	for _, e := range streamMsgs(t, js, "heed.confirm.chaos-deadline.answered") {
		var d answeredData
		e.decode(t, &d)
		if d.Method == "timeout" {
			timeouts++
		}
	}

	if rep.stuck > 0 || rep.failed > 0 || rep.cancelled > 0 {
		var open []string
		for _, id := range ids {
			if s := runStatus(t, js, id); s != "completed" {
				open = append(open, id+" "+s)
			}
		}
		t.Errorf("%d runs did not complete: %s", len(open), strings.Join(open[:min(len(open), 10)], "; "))
		for _, o := range open[:min(len(open), 3)] {
			id, _, _ := strings.Cut(o, " ")
			var seen []string
			for _, e := range streamMsgs(t, js, "heed.run."+id+".>") {
				seen = append(seen, fmt.Sprintf("#%d %s", e.Seq, strings.TrimPrefix(e.Subject, "heed.")))
				if strings.HasSuffix(e.Subject, ".step.failed") {
					seen = append(seen, fmt.Sprintf("(%s)", e.Data))
				}
				if strings.HasSuffix(e.Subject, ".paused") {
					// Where a run waits for an answer: what its
					// confirmation's log holds.
					var p struct {
						ConfirmID string `json:"confirm_id"`
					}
					if json.Unmarshal(e.Data, &p) == nil && p.ConfirmID != "" {
						var cs []string
						for _, c := range streamMsgs(t, js, "heed.confirm."+p.ConfirmID+".>") {
							cs = append(cs, fmt.Sprintf("#%d %s", c.Seq, strings.TrimPrefix(c.Subject, "heed.confirm."+p.ConfirmID+".")))
						}
						amu.Lock()
						asked := answered[p.ConfirmID]
						amu.Unlock()
						seen = append(seen, fmt.Sprintf("(confirmation %s: %s; the test saw the pause: %v)", p.ConfirmID, strings.Join(cs, ", "), asked))
					}
				}
			}
			t.Logf("log of %s: %s", id, strings.Join(seen, ", "))
			if m, ok := target.(interface{ mentions(string) string }); ok {
				t.Logf("what the services logged about %s (and their starts and exits):\n%s", id, m.mentions(id))
			}
		}
	}
	// What the services dead-lettered meanwhile, by code and original
	// subject's kind (an input a service could not finish with ends there).
	if dlq, err := js.Stream(ctxFor(t, 10*time.Second), "HEED_DLQ"); err == nil {
		counts := map[string]int{}
		for seq := uint64(1); ; {
			m, err := dlq.GetMsg(ctxFor(t, 10*time.Second), seq, jetstream.WithGetMsgSubject("heed.dlq.>"))
			if err != nil {
				break
			}
			orig := m.Header.Get("Heed-Dlq-Subject")
			if parts := strings.Split(orig, "."); len(parts) > 3 {
				orig = parts[1] + ".*." + strings.Join(parts[3:], ".")
			}
			counts[m.Header.Get("Heed-Dlq-Code")+" "+orig+" (by "+m.Header.Get("Heed-Dlq-Consumer")+")"]++
			seq = m.Sequence + 1
		}
		if len(counts) > 0 {
			t.Logf("dead letters during the chaos: %v", counts)
		}
	}
	if rep.overlaps > 0 {
		t.Errorf("%d tool calls ran while another live copy of the same call ran: %s", rep.overlaps, strings.Join(overlapKeys, ", "))
		for _, key := range overlapKeys[:min(len(overlapKeys), 3)] {
			id, _, _ := strings.Cut(key, "/")
			var seen []string
			for _, e := range streamMsgs(t, js, "heed.run."+id+".>") {
				seen = append(seen, fmt.Sprintf("#%d %s at %s", e.Seq, strings.TrimPrefix(e.Subject, "heed.run."+id+"."), e.Header.Get("ce-time")))
			}
			t.Logf("log of %s: %s", id, strings.Join(seen, ", "))
			var lines []string
			for _, l := range strings.Split(string(calls), "\n") {
				if strings.Contains(l, id) {
					lines = append(lines, "    "+l)
				}
			}
			t.Logf("the calls of %s (key pid time, parent: the runner's pid):\n%s", id, strings.Join(lines, "\n"))
			if m, ok := target.(interface{ mentions(string) string }); ok {
				t.Logf("what the services logged about %s:\n%s", id, m.mentions(id))
			}
		}
	}
	if len(rep.doubled) > 0 {
		t.Errorf("doubled steps: %s", strings.Join(rep.doubled, "; "))
	}
	rep.deadlineFired = timeouts
	if timeouts != 1 {
		t.Errorf("the deadline answered %d times, want once", timeouts)
	}
	if rep.lost > 0 || rep.twice > 0 {
		t.Errorf("side effects: %d completed steps without theirs, %d written twice", rep.lost, rep.twice)
	}
	if rep.resumedTwice > 0 {
		t.Errorf("%d runs resumed from their confirmation more than once", rep.resumedTwice)
	}
	// The projections equal a replay of the log.
	// (The projectors may still be folding the last events: heed replay
	// waits for them, and a difference is asked again for a minute.)
	rep.replayEqual = "differs"
	var replayOut []byte
	for end := time.Now().Add(3 * time.Minute); ; {
		out, err := exec.Command(heedBin, "replay", "--nats-url", url).CombinedOutput()
		if err == nil {
			rep.replayEqual = "equal"
			break
		}
		replayOut = append(out, []byte(err.Error())...)
		t.Logf("heed replay at %s: %s", time.Now().Format("15:04:05.000"), strings.TrimSpace(string(replayOut)))
		if time.Now().After(end) {
			t.Errorf("the projections differ from a replay of the log:\n%s", replayOut)
			t.Logf("the differing keys, live and rebuilt:\n%s", replayDiffs(t, url))
			break
		}
		time.Sleep(time.Second)
	}
	if rep.toolEnds < 2*rep.completed {
		t.Errorf("%d tool calls finished for %d completed runs of two tool steps", rep.toolEnds, rep.completed)
	}
	return rep
}

// replayDiffs runs heed replay --keep and shows, for a few keys of each
// projection that differs, the live value and the rebuilt one: what a
// difference is, not only where.
func replayDiffs(t *testing.T, url string) string {
	t.Helper()
	out, _ := exec.Command(heedBin, "replay", "--keep", "--json", "--nats-url", url).Output()
	nc, err := nats.Connect(url)
	if err != nil {
		return err.Error()
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var b strings.Builder
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var r struct {
			Bucket    string   `json:"bucket"`
			Replayed  string   `json:"replayed_to"`
			Missing   []string `json:"missing"`
			Extra     []string `json:"extra"`
			Different []string `json:"different"`
		}
		if dec.Decode(&r) != nil {
			break
		}
		keys := append(append(append([]string{}, r.Different...), r.Missing...), r.Extra...)
		for _, k := range keys[:min(len(keys), 5)] {
			fmt.Fprintf(&b, "  %s %s\n    live:    %s\n    rebuilt: %s\n", r.Bucket, k, kvValue(js, r.Bucket, k), kvValue(js, r.Replayed, k))
		}
		if r.Replayed != "" {
			_ = js.DeleteKeyValue(ctxFor(t, 10*time.Second), r.Replayed)
		}
	}
	return b.String()
}

func kvValue(js jetstream.JetStream, bucket, key string) string {
	if bucket == "" {
		return "(no bucket)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err.Error()
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("rev %d %s", e.Revision(), e.Value())
}

// runStatus reads a run's status from its own log: the last of its
// ending events, or running.
func runStatus(t *testing.T, js jetstream.JetStream, id string) string {
	t.Helper()
	status := "running"
	for _, e := range streamMsgs(t, js, "heed.run."+id+".>") {
		switch {
		case strings.HasSuffix(e.Subject, ".completed") && !strings.HasSuffix(e.Subject, ".step.completed"):
			status = "completed"
		case strings.HasSuffix(e.Subject, ".cancelled"):
			status = "cancelled"
		case strings.HasSuffix(e.Subject, ".failed") && !strings.HasSuffix(e.Subject, ".step.failed"):
			status = "failed"
		case strings.HasSuffix(e.Subject, ".resumed") && status == "failed":
			status = "running"
		}
	}
	return status
}
