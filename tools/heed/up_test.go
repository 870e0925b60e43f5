package main

// End-to-end tests of the heed CLI: every test runs the real binary as a
// child process (built once in TestMain) against its own embedded NATS
// server and talks to it with a plain nats.go client, as an outside user
// or agent would. No mocks of NATS.

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
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// heedBin is the heed binary under test, built by TestMain.
var heedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "heed-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		os.Exit(1)
	}
	heedBin = filepath.Join(dir, "heed")
	// The example tools' state (tasks, files) of this package's tests is
	// their own, not /tmp/heed-sim-state shared with other packages and
	// runs; heed up's children inherit it (childEnv).
	if os.Getenv("HEED_SIM_STATE") == "" {
		_ = os.Setenv("HEED_SIM_STATE", filepath.Join(dir, "sim-state"))
	}
	args := []string{"build", "-o", heedBin}
	if raceEnabled() {
		// A data race inside heed then fails the test: the race detector
		// makes the process exit with status 66 instead of 0.
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build heed:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// raceEnabled reports whether this test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// syncBuffer collects a child's output; safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a heed child process.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{} // closed once the process has exited
}

// childEnv is the environment without heed's own variables, so that a
// developer's HEED_NATS_URL cannot point a test at their real heed.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HEED_NATS_URL=") || strings.HasPrefix(kv, "HEED_DATA=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// startProc starts heed with args. When the test ends the process is
// interrupted (killed if it does not exit), and on failure its output is
// logged.
func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProcIn(t, "", name, args...)
}

// checkCleanExit reports an exit status other than 0 after sig, and errors
// or data races the process logged. It returns whether the exit was clean.
func (p *proc) checkCleanExit(sig syscall.Signal) bool {
	p.t.Helper()
	clean := true
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		p.t.Errorf("%s exited with status %d after %v, want 0 (%v)", p.name, code, sig, p.cmd.ProcessState)
		clean = false
	}
	for _, bad := range []string{"level=ERROR", "DATA RACE", "panic:"} {
		if strings.Contains(p.stderr.String(), bad) {
			p.t.Errorf("%s logged %q", p.name, bad)
			clean = false
		}
	}
	return clean
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) dump() {
	p.t.Logf("--- %s stdout ---\n%s", p.name, p.stdout.String())
	p.t.Logf("--- %s stderr ---\n%s", p.name, p.stderr.String())
}

// waitOutput waits until stdout contains s, failing early if the process
// exits first.
func (p *proc) waitOutput(s string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.stdout.String(), s) {
		if p.exited() {
			p.t.Fatalf("%s exited (%v) before printing %q\nstdout:\n%s\nstderr:\n%s", p.name, p.cmd.ProcessState, s, p.stdout.String(), p.stderr.String())
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not print %q within %s\nstdout:\n%s", p.name, s, timeout, p.stdout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig and requires a clean exit with status 0 within 10 seconds.
func (p *proc) stop(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s still running 10s after %v", p.name, sig)
	}
	if !p.checkCleanExit(sig) {
		p.t.FailNow()
	}
}

// heed is a running `heed up`.
type heed struct {
	*proc
	url string // where it listens
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	return eventstest.FreePort(t) // below the ephemeral range: restarts find it free
}

// startHeed runs `heed up` on data and port and waits until it is ready.
func startHeed(t *testing.T, data string, port int) *heed {
	t.Helper()
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := startProc(t, "heed up", "up", "--data", data, "--nats-listen", listen)
	p.waitOutput("ready", 30*time.Second)
	return &heed{proc: p, url: "nats://" + listen}
}

// connect opens a plain NATS client connection, closed when the test ends.
func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("heed-e2e-test"), nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func checkFor(t *testing.T, total, sleep time.Duration, f func() error) {
	t.Helper()
	eventstest.CheckFor(t, total, sleep, f)
}

// stepFailedData is a valid heed.run.step.failed payload.
const stepFailedData = `{"step":"deploy","index":0,"attempt":1,"error":{"message":"boom"}}`

// stepFailedMsg builds a step.failed event with heed's own library.
func stepFailedMsg(t *testing.T, runID, eventID string) *nats.Msg {
	t.Helper()
	ev, err := events.NewEvent(events.RunStepFailed, runID, eventID, "heed-e2e-test", json.RawMessage(stepFailedData))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := events.EncodeUnchecked(&ev)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// rawStepFailedMsg builds the same event by hand, as a publisher in any
// language would: CloudEvents binary mode with ce- headers (and no ce-time).
func rawStepFailedMsg(runID, eventID string) *nats.Msg {
	msg := nats.NewMsg("heed.run." + runID + ".step.failed")
	msg.Header.Set("ce-specversion", "1.0")
	msg.Header.Set("ce-id", eventID)
	msg.Header.Set("ce-source", "heed-e2e-test")
	msg.Header.Set("ce-type", "heed.run.step.failed")
	msg.Header.Set("ce-subject", runID)
	msg.Header.Set("Content-Type", "application/json")
	msg.Data = []byte(stepFailedData)
	return msg
}

func publish(t *testing.T, js jetstream.JetStream, msg *nats.Msg) *jetstream.PubAck {
	t.Helper()
	ack, err := js.PublishMsg(ctxFor(t, 5*time.Second), msg)
	if err != nil {
		t.Fatalf("publish to %s: %v", msg.Subject, err)
	}
	if ack.Stream != events.EventStream {
		t.Fatalf("publish to %s stored in stream %q, want %s", msg.Subject, ack.Stream, events.EventStream)
	}
	return ack
}

// indexEntry reads the index projection's entry for key: the stored value
// is an envelope {"seq": <log position>, "value": <entry>}.
func indexEntry(ctx context.Context, js jetstream.JetStream, key string) (readmodel.IndexEntry, []byte, error) {
	kv, err := js.KeyValue(ctx, readmodel.IndexBucket)
	if err != nil {
		return readmodel.IndexEntry{}, nil, fmt.Errorf("bucket %s: %w", readmodel.IndexBucket, err)
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return readmodel.IndexEntry{}, nil, fmt.Errorf("key %s: %w", key, err)
	}
	var env struct {
		Seq   uint64               `json:"seq"`
		Value readmodel.IndexEntry `json:"value"`
	}
	if err := json.Unmarshal(e.Value(), &env); err != nil {
		return readmodel.IndexEntry{}, nil, fmt.Errorf("key %s: %w", key, err)
	}
	return env.Value, e.Value(), nil
}

// waitIndexed waits until the index entry of run id counts want events and
// its last event is lastID.
func waitIndexed(t *testing.T, js jetstream.JetStream, runID string, want int, lastID string) readmodel.IndexEntry {
	t.Helper()
	var got readmodel.IndexEntry
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		e, _, err := indexEntry(ctxFor(t, 2*time.Second), js, readmodel.IndexKey("run", runID))
		if err != nil {
			return err
		}
		if e.Count != want || e.Last.ID != lastID {
			return fmt.Errorf("index entry run.%s: count %d, last event %q; want count %d, last %q", runID, e.Count, e.Last.ID, want, lastID)
		}
		got = e
		return nil
	})
	return got
}

func TestUpStartsAndStopsCleanly(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			h := startHeed(t, t.TempDir(), port)
			if out := h.stdout.String(); !strings.Contains(out, h.url) {
				t.Fatalf("stdout does not say where heed listens (%s):\n%s", h.url, out)
			}

			nc, js := connect(t, h.url)
			ctx := ctxFor(t, 10*time.Second)
			var names []string
			for n := range js.StreamNames(ctx).Name() {
				names = append(names, n)
			}
			for _, want := range []string{events.EventStream, events.DLQStream} {
				if _, err := js.Stream(ctx, want); err != nil {
					t.Errorf("stream %s: %v (streams: %v)", want, err, names)
				}
			}
			if _, err := js.KeyValue(ctx, readmodel.IndexBucket); err != nil {
				t.Errorf("index bucket %s: %v", readmodel.IndexBucket, err)
			}
			// The indexer answers its health check over NATS.
			reply, err := nc.Request("heed.svc.indexer.health", nil, 3*time.Second)
			if err != nil {
				t.Fatalf("indexer health: %v", err)
			}
			var health struct {
				Service, Status string
				Connected       bool
			}
			if err := json.Unmarshal(reply.Data, &health); err != nil || health.Service != "indexer" || health.Status != "ok" || !health.Connected {
				t.Errorf("indexer health = %s (%v), want service indexer, status ok, connected", reply.Data, err)
			}

			// Stop with the client still connected: heed must not wait for it.
			h.stop(sig)
			if out := h.stdout.String(); !strings.Contains(out, "heed: stopped") {
				t.Errorf("stdout lacks the stopped line:\n%s", out)
			}
			// The listening port is released.
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				t.Errorf("port %d still taken after heed exited: %v", port, err)
			} else {
				_ = l.Close()
			}
		})
	}
}

// Ctrl-C while heed is still starting (provisioning streams, starting
// services) is a clean stop too, not an error.
func TestUpInterruptedWhileStarting(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	p := startProc(t, "heed up", "up", "--data", t.TempDir(), "--nats-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	// The first line is printed once the embedded server accepts clients,
	// before the services connect and provision: interrupt right then.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stdout.String(), "embedded NATS listening") {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("heed up did not start:\n%s\n%s", p.stdout.String(), p.stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
	p.stop(syscall.SIGINT)
	out := p.stdout.String()
	if !strings.Contains(out, "heed: stopped") {
		t.Errorf("stdout lacks the stopped line:\n%s", out)
	}
	if strings.Contains(out, "ready") {
		t.Log("the interrupt came after heed was ready; the startup path was not exercised this time")
	}
}

func TestUpRestartKeepsData(t *testing.T) {
	t.Parallel()
	data, port := t.TempDir(), freePort(t)
	runID, eventID := "restart-run", "evt-restart-1"
	subject := "heed.run." + runID + ".step.failed"

	h := startHeed(t, data, port)
	nc, js := connect(t, h.url)
	ack := publish(t, js, stepFailedMsg(t, runID, eventID))
	waitIndexed(t, js, runID, 1, eventID)

	ctx := ctxFor(t, 30*time.Second)
	stream, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgsBefore := info.State.Msgs
	if msgsBefore != 1 {
		t.Fatalf("%s holds %d messages, want 1", events.EventStream, msgsBefore)
	}
	_, kvBefore, err := indexEntry(ctx, js, readmodel.IndexKey("run", runID))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	h.stop(syscall.SIGINT)

	h = startHeed(t, data, port)
	_, js = connect(t, h.url)
	stream, err = js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	info, err = stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != msgsBefore {
		t.Errorf("after restart %s holds %d messages, want %d", events.EventStream, info.State.Msgs, msgsBefore)
	}
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("after restart, event on %s: %v", subject, err)
	}
	if m.Sequence != ack.Sequence || m.Header.Get("ce-id") != eventID || string(m.Data) != stepFailedData {
		t.Errorf("after restart the stored event is seq %d, ce-id %q, data %s; want seq %d, ce-id %q, data %s",
			m.Sequence, m.Header.Get("ce-id"), m.Data, ack.Sequence, eventID, stepFailedData)
	}
	_, kvAfter, err := indexEntry(ctx, js, readmodel.IndexKey("run", runID))
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if !bytes.Equal(kvAfter, kvBefore) {
		t.Errorf("index entry changed across restart:\nbefore %s\nafter  %s", kvBefore, kvAfter)
	}

	// The indexer resumes where it stopped: a new event is counted once and
	// the old one is not applied again.
	publish(t, js, stepFailedMsg(t, runID, "evt-restart-2"))
	waitIndexed(t, js, runID, 2, "evt-restart-2")
}

func TestBadMessageDeadLetteredWithinMoments(t *testing.T) {
	t.Parallel()
	h := startHeed(t, t.TempDir(), freePort(t))
	_, js := connect(t, h.url)
	ctx := ctxFor(t, 30*time.Second)
	dlq, err := js.Stream(ctx, events.DLQStream)
	if err != nil {
		t.Fatal(err)
	}

	const subject, dlqSubject, body = "heed.run.x.step.failed", "heed.dlq.run.x.step.failed", "not a cloudevent"
	published := time.Now()
	ack, err := js.Publish(ctx, subject, []byte(body)) // no headers at all
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	var dead *jetstream.RawStreamMsg
	for {
		dead, err = dlq.GetLastMsgForSubject(ctx, dlqSubject)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("get %s: %v", dlqSubject, err)
		}
		// Within moments (logged above: tens of milliseconds); 5 s, for a
		// race-built heed up beside other tests' on 2 cores.
		if time.Since(published) > 5*time.Second {
			t.Fatalf("no dead letter on %s within 5s of publishing", dlqSubject)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("dead-lettered in %s", time.Since(published).Round(time.Millisecond))
	if r := dead.Header.Get(events.HeaderDLQReason); r == "" {
		t.Errorf("dead letter has no %s header: %v", events.HeaderDLQReason, dead.Header)
	}
	if c := dead.Header.Get(events.HeaderDLQCode); c != string(events.CodeUndecodable) {
		t.Errorf("%s = %q, want %q", events.HeaderDLQCode, c, events.CodeUndecodable)
	}
	if string(dead.Data) != body {
		t.Errorf("dead letter body = %q, want the original %q", dead.Data, body)
	}
	if s, seq := dead.Header.Get(events.HeaderDLQSubject), dead.Header.Get(events.HeaderDLQSeq); s != subject || seq != strconv.FormatUint(ack.Sequence, 10) {
		t.Errorf("dead letter points at %s seq %s, want %s seq %d", s, seq, subject, ack.Sequence)
	}

	// The consumer went on: a valid event for run x is indexed. The bad
	// message is not an event, so it is not counted.
	const eventID = "evt-after-dlq"
	publish(t, js, rawStepFailedMsg("x", eventID))
	e := waitIndexed(t, js, "x", 1, eventID)
	if e.Kind != "run" || e.ID != "x" || e.First.ID != eventID || e.Step != "deploy" {
		t.Errorf("index entry run.x = %+v", e)
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("%s holds %d messages, want exactly 1 dead letter", events.DLQStream, info.State.Msgs)
	}
}

// runCLI runs one heed command to completion.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, heedBin, args...)
	cmd.Env = childEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("heed %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("heed %s: timed out\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out.String(), errb.String())
	}
	return out.String(), errb.String(), code
}

func TestAuditTailReplay(t *testing.T) {
	t.Parallel()
	h := startHeed(t, t.TempDir(), freePort(t))
	_, js := connect(t, h.url)
	const runID, eventID = "audit-run", "evt-audit-1"
	publish(t, js, stepFailedMsg(t, runID, eventID))
	// A bad message in the same run's subject tree: audit shows it as
	// rejected, --json leaves it out, replay skips it.
	publish(t, js, &nats.Msg{Subject: "heed.run." + runID + ".step.failed", Data: []byte("garbage")})
	publish(t, js, rawStepFailedMsg(runID, "evt-audit-2"))
	waitIndexed(t, js, runID, 2, "evt-audit-2")

	cli := func(args ...string) (string, string, int) {
		return runCLI(t, append([]string{"--nats-url", h.url}, args...)...)
	}
	show := func(args []string, out, errOut string, code int) string {
		return fmt.Sprintf("heed %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}

	t.Run("status", func(t *testing.T) {
		// The run's state folded from the log, as the services fold it:
		// the garbage message is skipped, the failure shows.
		out, errOut, code := cli("status", runID)
		if code != 0 {
			t.Fatal(show([]string{"status", runID}, out, errOut, code))
		}
		for _, want := range []string{"run " + runID, "driven by agent", "deploy", "failed", "boom"} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		out, errOut, code = cli("status", "no-such-run")
		if code == 0 || !strings.Contains(errOut, "no run") {
			t.Error(show([]string{"status", "no-such-run"}, out, errOut, code))
		}
	})

	t.Run("audit", func(t *testing.T) {
		out, errOut, code := cli("audit", runID)
		if code != 0 {
			t.Fatal(show([]string{"audit", runID}, out, errOut, code))
		}
		for _, want := range []string{
			"run " + runID + ": running, 2 events", // the index summary
			"run.step.failed", "deploy", "error: boom",
			"INVALID", // the bad message, shown as rejected
		} {
			if !strings.Contains(out, want) {
				t.Errorf("audit output lacks %q:\n%s", want, out)
			}
		}
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[2] == "run.step.failed" {
				n++
			}
		}
		if n != 2 {
			t.Errorf("audit shows %d step.failed events, want 2:\n%s", n, out)
		}
	})

	t.Run("audit --json", func(t *testing.T) {
		out, errOut, code := cli("audit", runID, "--json")
		if code != 0 {
			t.Fatal(show([]string{"audit", runID, "--json"}, out, errOut, code))
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("audit --json printed %d lines, want 2 (one per valid event):\n%s", len(lines), out)
		}
		var ids []string
		for _, l := range lines {
			var ce struct {
				SpecVersion string          `json:"specversion"`
				ID          string          `json:"id"`
				Type        string          `json:"type"`
				Subject     string          `json:"subject"`
				Data        json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal([]byte(l), &ce); err != nil {
				t.Fatalf("audit --json line is not JSON: %v\n%s", err, l)
			}
			if ce.SpecVersion != "1.0" || ce.ID == "" || ce.Type != string(events.RunStepFailed) || ce.Subject != runID || len(ce.Data) == 0 {
				t.Errorf("audit --json line is not the expected CloudEvent: %s", l)
			}
			ids = append(ids, ce.ID)
		}
		if ids[0] != eventID || ids[1] != "evt-audit-2" {
			t.Errorf("audit --json event ids = %v, want [%s evt-audit-2] in log order", ids, eventID)
		}
	})

	t.Run("replay", func(t *testing.T) {
		out, errOut, code := cli("replay")
		if code != 0 || !strings.Contains(out, "identical") {
			t.Fatal(show([]string{"replay"}, out, errOut, code))
		}
		if !strings.Contains(out, "2 events (1 skipped: ") {
			t.Errorf("replay output does not count 2 events and 1 rejected:\n%s", out)
		}
	})

	t.Run("replay --apply after a purge", func(t *testing.T) {
		// The operator purges a projection's bucket: replay says it
		// differs, --apply repairs it, a second replay finds nothing, and
		// no scratch bucket is left.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "KV_heed_index")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := cli("replay")
		if code != 1 || !strings.Contains(out, "DIFFERENT") || !strings.Contains(errOut, "--apply") {
			t.Fatal(show([]string{"replay"}, out, errOut, code))
		}
		out, errOut, code = cli("replay", "--apply", "--json")
		if code != 0 {
			t.Fatal(show([]string{"replay", "--apply", "--json"}, out, errOut, code))
		}
		repaired := false
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var rep map[string]any
			if err := json.Unmarshal([]byte(l), &rep); err != nil {
				t.Fatalf("replay --json line is not JSON: %v\n%s", err, l)
			}
			if _, ok := rep["projection"]; !ok {
				t.Errorf("replay --json keys are not snake_case: %s", l)
			}
			if rep["bucket"] == "heed_index" && rep["applied"] != nil && rep["applied"].(float64) >= 1 {
				repaired = true
			}
		}
		if !repaired {
			t.Errorf("replay --apply did not report the index repaired:\n%s", out)
		}
		out, errOut, code = cli("replay")
		if code != 0 || strings.Contains(out, "DIFFERENT") {
			t.Fatal(show([]string{"replay"}, out, errOut, code))
		}
		for name := range js.KeyValueStoreNames(ctx).Name() {
			if strings.HasSuffix(name, "_replay") {
				t.Errorf("scratch bucket %s left behind", name)
			}
		}
	})

	t.Run("events tail --all", func(t *testing.T) {
		tail := startProc(t, "heed events tail", "--nats-url", h.url, "events", "tail", "--all")
		tail.waitOutput("run.step.failed", 10*time.Second)
		if out := tail.stdout.String(); !strings.Contains(out, runID) || !strings.Contains(out, "error: boom") {
			t.Errorf("tail output lacks the run id or the error:\n%s", out)
		}
		// Live events follow the backlog.
		publish(t, js, rawStepFailedMsg("tail-run", "evt-tail-live"))
		tail.waitOutput("tail-run", 10*time.Second)
		tail.stop(syscall.SIGINT)
	})

	t.Run("events tail dead letters", func(t *testing.T) {
		tail := startProc(t, "heed events tail heed.dlq.>", "--nats-url", h.url, "events", "tail", "heed.dlq.>", "--all")
		tail.waitOutput("DEAD LETTER", 10*time.Second)
		if out := tail.stdout.String(); !strings.Contains(out, string(events.CodeUndecodable)) {
			t.Errorf("dead-letter tail lacks the code %s:\n%s", events.CodeUndecodable, out)
		}
		tail.stop(syscall.SIGINT)
	})

	t.Run("audit unknown id", func(t *testing.T) {
		out, errOut, code := cli("audit", "does-not-exist")
		if code != 2 { // not found
			t.Fatal(show([]string{"audit", "does-not-exist"}, out, errOut, code))
		}
		if !strings.Contains(errOut, `no events for "does-not-exist"`) {
			t.Errorf("audit of an unknown id: stderr lacks a clear message:\n%s", errOut)
		}
	})

	t.Run("audit invalid id", func(t *testing.T) {
		out, errOut, code := cli("audit", "not.an.id")
		if code != 2 || !strings.Contains(errOut, "not a valid run, confirmation or escalation id") {
			t.Error(show([]string{"audit", "not.an.id"}, out, errOut, code))
		}
	})

	t.Run("no heed running", func(t *testing.T) {
		url := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
		out, errOut, code := runCLI(t, "--nats-url", url, "audit", runID)
		if code == 0 || !strings.Contains(errOut, "cannot reach NATS") {
			t.Error(show([]string{"--nats-url", url, "audit", runID}, out, errOut, code))
		}
	})
}

// TestAbandonedAgentRun: heed up --abandon-after ends an outside agent's
// run that went quiet in the middle of a call: heed status says
// abandoned, and the learner lets go of the call's shape.
func TestAbandonedAgentRun(t *testing.T) {
	t.Parallel()
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	p := startProc(t, "heed up", "up", "--data", t.TempDir(), "--nats-listen", listen, "--abandon-after", "2s", "--sweep-every", "200ms")
	p.waitOutput("ready", 30*time.Second)
	url := "nats://" + listen
	_, js := connect(t, url)
	const runID = "quiet-agent-run"
	ev, err := events.NewEvent(events.RunStepStarted, runID, runID+"/s0", "agent/quiet", events.StepStartedData{Step: "push", Index: 0, Attempt: 1, Kind: "tool", Tool: "git", Args: map[string]any{"ref": "main"}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := events.EncodeUnchecked(&ev)
	if err != nil {
		t.Fatal(err)
	}
	publish(t, js, msg)
	patterns := func() (bool, error) {
		kv, err := js.KeyValue(ctxFor(t, 2*time.Second), readmodel.PatternsBucket)
		if err != nil {
			return false, err
		}
		_, err = kv.Get(ctxFor(t, 2*time.Second), "call."+runID)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if ok, err := patterns(); !ok {
			return fmt.Errorf("no call.%s in heed_patterns (%v)", runID, err)
		}
		return nil
	})
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		out, errOut, code := runCLI(t, "--nats-url", url, "status", runID)
		if code != 0 || !strings.Contains(out, "ABANDONED") || !strings.Contains(out, "abandoned: no event for") {
			return fmt.Errorf("heed status: exit %d\n%s%s", code, out, errOut)
		}
		return nil
	})
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if ok, err := patterns(); ok || err != nil {
			return fmt.Errorf("call.%s still in heed_patterns (%v)", runID, err)
		}
		return nil
	})
}
