package conformance

// The harness: heed runs as a real child process (`heed up`, built once in
// TestMain) with its own embedded NATS server; the tests talk to it with a
// plain nats.go client, as an agent in any language would. Nothing here
// imports heed's code: subjects, headers and JSON bodies are spelled out as
// docs/EVENTS.md and docs/AGENTS.md give them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The contract's names (docs/EVENTS.md).
const (
	eventStream = "HEED_EVENTS"
	indexBucket = "heed_index"
	fixesBucket = "heed_fixes"
	agentName   = "agent/conformance"
	eventSource = "agent/conformance"
)

var (
	// repoRoot is the heed repository: the parent of this module.
	repoRoot string
	// heedBin is the heed CLI under test, built by TestMain.
	heedBin string
	// natsServerBin is nats-server, built by TestMain from the version heed
	// embeds, for tests that run NATS as a process of its own.
	natsServerBin string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "working directory:", err)
		return 1
	}
	repoRoot = filepath.Dir(wd)
	dir, err := os.MkdirTemp("", "heed-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	heedBin = filepath.Join(dir, "heed")
	natsServerBin = filepath.Join(dir, "nats-server")
	// Both at once: this is every conformance test's start-up time.
	builds := []*exec.Cmd{
		exec.Command("go", "build", "-o", heedBin, "./tools/heed"),
		exec.Command("go", "build", "-o", natsServerBin, "github.com/nats-io/nats-server/v2"),
	}
	builds[0].Dir = repoRoot
	builds[1].Dir = filepath.Join(repoRoot, "events") // the module that requires it
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, b := range builds {
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		wg.Go(func() { errs[i] = b.Run() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", strings.Join(builds[i].Args, " "), err)
			return 1
		}
	}
	return m.Run()
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

// heed is a running `heed up` and a client connected to it.
type heed struct {
	t      *testing.T
	url    string
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{} // closed when the process has exited
	// stopped: stop ran (a test may stop heed itself to restart it).
	stopped bool

	nc *nats.Conn
	js jetstream.JetStream
}

// childEnv is the environment without heed's own variables (a developer's
// HEED_NATS_URL must not point a test at their real heed), with the
// simulated tools' state in a directory of the test's own.
func childEnv(simState string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HEED_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HEED_SIM_STATE="+simState)
}

// freePort returns a loopback port nobody listens on right now.
//
// The port comes from below the kernel's ephemeral range: a port the
// kernel hands out (a listen on :0, the local end of every outgoing
// connection) may be taken again by the time the server binds it — a
// node's own route connections took another node's client port, and a
// node killed and restarted must find its port free again.
func freePort(t *testing.T) int {
	t.Helper()
	low := ephemeralLow()
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if portsTaken[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		_ = l.Close()
		portsTaken[port] = true
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

var (
	portMu     sync.Mutex
	portsTaken = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 12000 {
		return 32768
	}
	return n
}

// startHeed runs `heed up` from the repository root with the example tools
// (skills/tools.yaml: its ./tools/... commands resolve against the tools
// file's directory), waits until it says it is ready and connects to it.
// At cleanup the process is interrupted (killed if it does not stop) and,
// if the test failed, its output is logged.
func startHeed(t *testing.T) *heed {
	t.Helper()
	return startHeedIn(t, t.TempDir())
}

// startHeedIn is startHeed with its data in dir: a second heed on the same
// dir after the first stopped is a restart.
func startHeedIn(t *testing.T, dir string) *heed {
	t.Helper()
	return startHeedWith(t, dir, filepath.Join(repoRoot, "skills", "tools.yaml"))
}

// startHeedWith is startHeedIn with another tools file.
func startHeedWith(t *testing.T, dir, toolsFile string) *heed {
	t.Helper()
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	h := &heed{t: t, url: "nats://" + listen, done: make(chan struct{})}
	h.cmd = exec.Command(heedBin, "up",
		"--data", dir,
		"--nats-listen", listen,
		"--tools", toolsFile)
	h.cmd.Dir = repoRoot
	h.cmd.Env = childEnv(t.TempDir())
	h.cmd.Stdout, h.cmd.Stderr = &h.stdout, &h.stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("start heed up: %v", err)
	}
	go func() {
		_ = h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(h.stop)

	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(h.stdout.String(), "heed: ready") {
		select {
		case <-h.done:
			t.Fatalf("heed up exited (%v) before it was ready", h.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("heed up did not say it was ready within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	nc, err := nats.Connect(h.url, nats.Name("heed-conformance"), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to %s: %v", h.url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	h.nc, h.js = nc, js
	return h
}

// kill ends heed at once, as kill -9 does: no drain, nothing flushed.
func (h *heed) kill() {
	h.stopped = true
	_ = h.cmd.Process.Kill()
	<-h.done
}

// stop interrupts heed (Ctrl-C drains and stops it with exit status 0,
// README.md), kills it if it does not stop in time, and dumps its output if
// the test failed.
func (h *heed) stop() {
	if h.stopped {
		return
	}
	h.stopped = true
	t := h.t
	select {
	case <-h.done:
		t.Errorf("heed up exited during the test (%v)", h.cmd.ProcessState)
	default:
		_ = h.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-h.done:
			if code := h.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("heed up exited with status %d after SIGINT, want 0 (%v)", code, h.cmd.ProcessState)
			}
		case <-time.After(15 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.done
			t.Errorf("heed up did not stop within 15s of SIGINT; killed")
		}
	}
	if strings.Contains(h.stderr.String(), "panic:") {
		t.Errorf("heed up panicked")
	}
	if t.Failed() {
		t.Logf("--- heed up stdout ---\n%s", h.stdout.String())
		t.Logf("--- heed up stderr ---\n%s", h.stderr.String())
	}
}

// checkFor calls f every interval until it returns nil, failing the test
// with f's last error if it still fails after timeout (as nats-server's
// tests do).
func checkFor(t testing.TB, timeout, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(interval)
	}
	t.Fatalf("condition not met after %v: %v", timeout, err)
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ---- commands: request/reply on heed.cmd.* ----

// cmdError is a command's error reply: the Nats-Service-Error-Code header
// and the JSON body {"code", "message", "answer"}.
type cmdError struct {
	HeaderCode string
	Code       string     `json:"code"`
	Message    string     `json:"message"`
	Answer     *answerRef `json:"answer"`
	Raw        string
}

func (e *cmdError) Error() string {
	return fmt.Sprintf("error reply %s (header %s): %s", e.Code, e.HeaderCode, e.Raw)
}

// answerRef names the answer that took effect.
type answerRef struct {
	EventID string `json:"event_id"`
	Choice  string `json:"choice"`
	Method  string `json:"method"`
	By      string `json:"by"`
	Channel string `json:"channel"`
	At      string `json:"at"`
}

// request sends a command and decodes a successful reply into out (nil:
// ignore). An error reply comes back as *cmdError; a transport failure as
// another error.
func request(nc *nats.Conn, subject string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		e := &cmdError{HeaderCode: code, Raw: string(msg.Data)}
		if err := json.Unmarshal(msg.Data, e); err != nil {
			e.Message = "body is not JSON: " + err.Error()
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(msg.Data, out); err != nil {
			return fmt.Errorf("%s: reply %q is not the expected JSON: %w", subject, msg.Data, err)
		}
	}
	return nil
}

// mustRequest is request for commands that must succeed.
func mustRequest(t testing.TB, nc *nats.Conn, subject string, body, out any) {
	t.Helper()
	if err := request(nc, subject, body, out); err != nil {
		b, _ := json.Marshal(body)
		t.Fatalf("%s %s: %v", subject, b, err)
	}
}

type runReply struct {
	RunID     string `json:"run_id"`
	ConfirmID string `json:"confirm_id"`
	Status    string `json:"status"`
}

// startRun starts a run of an inline skill (heed.cmd.run.start).
func startRun(t testing.TB, nc *nats.Conn, skill string, inputs map[string]any, agent string) string {
	t.Helper()
	req := map[string]any{
		"skill":        map[string]any{"source": skill, "file": "conformance.yaml"},
		"inputs":       inputs,
		"requested_by": eventSource,
	}
	if agent != "" {
		req["agent"] = agent
	}
	var rep runReply
	mustRequest(t, nc, "heed.cmd.run.start", req, &rep)
	if rep.RunID == "" {
		t.Fatalf("heed.cmd.run.start replied without a run_id: %+v", rep)
	}
	return rep.RunID
}

// ---- events: CloudEvents binary mode on JetStream ----

// event is one message of HEED_EVENTS, read back.
type event struct {
	Seq     uint64
	Subject string
	Type    string
	ID      string
	Source  string
	Header  nats.Header
	Data    json.RawMessage
}

func newEvent(seq uint64, subject string, h nats.Header, data []byte) event {
	return event{Seq: seq, Subject: subject, Type: h.Get("ce-type"), ID: h.Get("ce-id"), Source: h.Get("ce-source"),
		Header: h, Data: append(json.RawMessage(nil), data...)}
}

func (e event) String() string {
	return fmt.Sprintf("#%d %s id=%s %s", e.Seq, e.Subject, e.ID, e.Data)
}

// decode unmarshals the event's data into v.
func (e event) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(e.Data, v); err != nil {
		t.Fatalf("event %s: data is not the expected JSON: %v", e, err)
	}
}

// eventMsg builds an event as any publisher would: the subject is
// heed.<kind>.<aggregate-id>.<verb>, the attributes are ce-* headers, the
// data is the JSON payload and Nats-Msg-Id is the event id.
func eventMsg(typ, aggregate, id string, data any) *nats.Msg {
	kind, verb, _ := strings.Cut(strings.TrimPrefix(typ, "heed."), ".")
	msg := nats.NewMsg("heed." + kind + "." + aggregate + "." + verb)
	msg.Header.Set("ce-specversion", "1.0")
	msg.Header.Set("ce-id", id)
	msg.Header.Set("ce-source", eventSource)
	msg.Header.Set("ce-type", typ)
	msg.Header.Set("ce-subject", aggregate)
	msg.Header.Set("ce-datacontenttype", "application/json")
	msg.Header.Set("Nats-Msg-Id", id)
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	msg.Data = b
	return msg
}

// publishEvent stores an event in the log with a JetStream publish.
func publishEvent(js jetstream.JetStream, typ, aggregate, id string, data any) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := eventMsg(typ, aggregate, id, data)
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", msg.Subject, err)
	}
	if ack.Stream != eventStream {
		return ack, fmt.Errorf("publish %s: stored in stream %q, want %s", msg.Subject, ack.Stream, eventStream)
	}
	return ack, nil
}

// streamMsgs reads every message of HEED_EVENTS on subject (wildcards
// allowed), in stream order, by sequence.
func streamMsgs(t testing.TB, js jetstream.JetStream, subject string) []event {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	s, err := js.Stream(ctx, eventStream)
	if err != nil {
		t.Fatalf("stream %s: %v", eventStream, err)
	}
	var out []event
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatalf("read %s from sequence %d: %v", subject, seq, err)
		}
		out = append(out, newEvent(m.Sequence, m.Subject, m.Header, m.Data))
		seq = m.Sequence + 1
	}
}

// watcher follows subjects of HEED_EVENTS from the start of the log with an
// ordered consumer, so it misses nothing published before it started.
type watcher struct {
	t    testing.TB
	what string
	mu   sync.Mutex
	evs  []event
}

func watch(t testing.TB, js jetstream.JetStream, subjects ...string) *watcher {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	cons, err := js.OrderedConsumer(ctx, eventStream, jetstream.OrderedConsumerConfig{FilterSubjects: subjects})
	if err != nil {
		t.Fatalf("ordered consumer on %v: %v", subjects, err)
	}
	w := &watcher{t: t, what: strings.Join(subjects, ", ")}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		w.mu.Lock()
		w.evs = append(w.evs, newEvent(meta.Sequence.Stream, m.Subject(), m.Headers(), m.Data()))
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("consume %v: %v", subjects, err)
	}
	t.Cleanup(cc.Stop)
	return w
}

// all returns every event seen so far, in log order.
func (w *watcher) all() []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]event(nil), w.evs...)
}

// find returns the events seen so far that match.
func (w *watcher) find(match func(event) bool) []event {
	var out []event
	for _, e := range w.all() {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

// dump lists the events seen, for failure messages.
func (w *watcher) dump() string {
	var b strings.Builder
	for _, e := range w.all() {
		fmt.Fprintf(&b, "\n  %s", e)
	}
	return b.String()
}

// waitFor waits until an event that matches has been seen and returns the
// first one; on timeout it fails with what and every event seen.
func (w *watcher) waitFor(timeout time.Duration, what string, match func(event) bool) event {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if found := w.find(match); len(found) > 0 {
			return found[0]
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no %s within %v; events on %s:%s", what, timeout, w.what, w.dump())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitSubject waits for the first event on subject.
func (w *watcher) waitSubject(timeout time.Duration, subject string) event {
	w.t.Helper()
	return w.waitFor(timeout, subject, func(e event) bool { return e.Subject == subject })
}

func isSubject(subject string) func(event) bool {
	return func(e event) bool { return e.Subject == subject }
}

// ---- the read model ----

// indexEntry is heed_index's value for one aggregate (the fields the
// tests read).
type indexEntry struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Status   string `json:"status"`
	Count    int    `json:"count"`
	RunID    string `json:"run_id"`
	Choice   string `json:"choice"`
	Method   string `json:"method"`
	By       string `json:"by"`
	Channel  string `json:"channel"`
	AnswerID string `json:"answer_id"`
	Refused  int    `json:"refused"`
	Votes    []struct {
		Choice string `json:"choice"`
		By     string `json:"by"`
	} `json:"votes"`
}

// readIndex reads heed_index key: an envelope {"seq": N, "value": {...}}.
func readIndex(ctx context.Context, js jetstream.JetStream, key string) (indexEntry, error) {
	kv, err := js.KeyValue(ctx, indexBucket)
	if err != nil {
		return indexEntry{}, fmt.Errorf("bucket %s: %w", indexBucket, err)
	}
	return kvIndex(ctx, kv, key)
}

// kvIndex reads key of the heed_index bucket kv.
func kvIndex(ctx context.Context, kv jetstream.KeyValue, key string) (indexEntry, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return indexEntry{}, fmt.Errorf("%s key %s: %w", indexBucket, key, err)
	}
	var env struct {
		Seq   uint64      `json:"seq"`
		Value *indexEntry `json:"value"`
	}
	if err := json.Unmarshal(e.Value(), &env); err != nil {
		return indexEntry{}, fmt.Errorf("%s key %s: %q is not an envelope: %w", indexBucket, key, e.Value(), err)
	}
	if env.Seq == 0 || env.Value == nil {
		return indexEntry{}, fmt.Errorf("%s key %s: %q is not an envelope {seq, value}", indexBucket, key, e.Value())
	}
	return *env.Value, nil
}

// waitIndex waits until the index entry of key satisfies ok (which returns
// what is still wrong) and returns it.
func waitIndex(t testing.TB, js jetstream.JetStream, key string, timeout time.Duration, ok func(indexEntry) error) indexEntry {
	t.Helper()
	var got indexEntry
	checkFor(t, timeout, 20*time.Millisecond, func() error {
		e, err := readIndex(ctxFor(t, 5*time.Second), js, key)
		if err != nil {
			return err
		}
		if err := ok(e); err != nil {
			return fmt.Errorf("%s %s: %+v: %w", indexBucket, key, e, err)
		}
		got = e
		return nil
	})
	return got
}

// ---- event payloads the tests read ----

type pausedData struct {
	Reason    string `json:"reason"`
	Step      string `json:"step"`
	Index     int    `json:"index"`
	ConfirmID string `json:"confirm_id"`
}

type resumedData struct {
	Step      string `json:"step"`
	Index     int    `json:"index"`
	ConfirmID string `json:"confirm_id"`
	Choice    string `json:"choice"`
	Method    string `json:"method"`
	By        string `json:"by"`
}

type answeredData struct {
	Choice  string `json:"choice"`
	Method  string `json:"method"`
	By      string `json:"by"`
	Channel string `json:"channel,omitempty"`
	Reason  string `json:"reason,omitempty"`
	RunID   string `json:"run_id,omitempty"`
}

type refusedData struct {
	AnswerID  string     `json:"answer_id"`
	AnswerSeq uint64     `json:"answer_seq"`
	Choice    string     `json:"choice"`
	Method    string     `json:"method"`
	By        string     `json:"by"`
	Code      string     `json:"code"`
	Reason    string     `json:"reason"`
	Winner    *answerRef `json:"winner"`
}

type stepStartedData struct {
	Step    string         `json:"step"`
	Index   int            `json:"index"`
	Attempt int            `json:"attempt"`
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args"`
	RetryOf string         `json:"retry_of"`
}

type stepCompletedData struct {
	Step    string          `json:"step"`
	Index   int             `json:"index"`
	Attempt int             `json:"attempt"`
	Output  json.RawMessage `json:"output"`
}

type completedData struct {
	Summary string `json:"summary"`
}
