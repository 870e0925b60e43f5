package runner_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// TestMain turns the test binary into the programs exec tools run, chosen by
// an environment variable the tool's set_env provides (with GORACE's exit
// pause off: a race-enabled binary otherwise sleeps a second on exit):
//
//	HEED_SLEEP_HELPER=1  append $HEED_IDEMPOTENCY_KEY to $HEED_CALL_LOG (if
//	                     set), write the pid to args[1] (if given), sleep
//	                     args[0], append the key to $HEED_CALL_LOG.done and
//	                     print {"ok":true}
//	HEED_FAIL_HELPER=1   write args[0] to stderr and exit 1
//	HEED_TASK_HELPER=1   a task in $HEED_TASK_DIR (changeset_test.go)
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("HEED_TASK_HELPER") == "1":
		os.Exit(taskHelper(os.Args[1:]))
	case os.Getenv("HEED_SLEEP_HELPER") == "1":
		if log := os.Getenv("HEED_CALL_LOG"); log != "" {
			appendLine(log, os.Getenv("HEED_IDEMPOTENCY_KEY"))
		}
		if len(os.Args) > 2 && os.Args[2] != "" {
			_ = os.WriteFile(os.Args[2], []byte(strconv.Itoa(os.Getpid())), 0o644)
		}
		d, _ := time.ParseDuration(os.Args[1])
		time.Sleep(d)
		if log := os.Getenv("HEED_CALL_LOG"); log != "" {
			appendLine(log+".done", os.Getenv("HEED_IDEMPOTENCY_KEY"))
		}
		fmt.Println(`{"ok":true}`)
		os.Exit(0)
	case os.Getenv("HEED_FAIL_HELPER") == "1":
		fmt.Fprintln(os.Stderr, os.Args[1])
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// appendLine appends line to the file at path (created if missing); the
// helper's call logs are read by the tests.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, _ = f.WriteString(line + "\n")
		_ = f.Close()
	}
}

// self is the test binary: the program the test's exec tools run.
func self(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testTools are exec tools backed by the test binary; SELF is replaced by
// its path.
const testTools = `
  sleeper:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_SLEEP_HELPER: "1"}
    args: ["{{ args.duration }}", "{{ args.pidfile ?? \"\" }}"]
  always_fails:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_FAIL_HELPER: "1"}
    args: ["boom {{ run.attempt }}"]
`

// writeTools writes a tools file with the example tools of skills/ (by
// absolute path) and the test's own.
func writeTools(t testing.TB, extra string) string {
	t.Helper()
	examples, err := os.ReadFile("../../skills/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs("../../skills/tools")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(examples), "./tools/", dir+"/")
	text = strings.TrimRight(text, "\n") + "\n" + strings.ReplaceAll(extra, "SELF", strconv.Quote(self(t)))
	path := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// harness is heed with a runner (and optionally the confirm router), each
// on its own connection, against a fresh embedded server.
type harness struct {
	t   testing.TB
	env *eventstest.Env
	bus *events.Bus
	nc  *nats.Conn
	// drops counts disconnects of the test's connection.
	drops *atomic.Int64
}

// with is the harness seen from a subtest.
func (h *harness) with(t testing.TB) *harness {
	c := *h
	c.t = t
	return &c
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	env := eventstest.Start(t)
	h := &harness{t: t, env: env, drops: &atomic.Int64{}}
	// The test's own connection; a disconnect would lose requests in
	// flight, so it is counted and reported.
	nc, err := nats.Connect(env.URL(), nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
		if err != nil {
			h.drops.Add(1)
			t.Logf("test connection lost: %v", err)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if h.bus, err = events.NewBus(nc, env.Codec); err != nil {
		t.Fatal(err)
	}
	h.nc = nc
	return h
}

// service runs one service with its own runtime until the test ends.
func (h *harness) service(name string, run func(context.Context, *service.Runtime) error) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rt, err := service.Connect(ctx, name, h.env.URL(), eventstest.Logger(h.t), events.DefaultTopology())
	if err != nil {
		cancel()
		h.t.Fatalf("connect %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, rt) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			// A test that ends while a service is still starting cancels
			// its start: a clean stop, as service.Main and heed up take it.
			if err != nil && !errors.Is(err, context.Canceled) {
				h.t.Errorf("%s stopped with %v", name, err)
			}
		case <-time.After(20 * time.Second):
			h.t.Errorf("%s did not stop", name)
		}
		rt.Close()
	})
}

func (h *harness) runner(cfg runner.Config) {
	h.t.Helper()
	h.service("runner", func(ctx context.Context, rt *service.Runtime) error { return runner.Run(ctx, rt, cfg) })
}

func (h *harness) confirmRouter() {
	h.t.Helper()
	h.service("confirm-router", func(ctx context.Context, rt *service.Runtime) error {
		return confirm.Run(ctx, rt, confirm.Config{})
	})
}

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

// request sends a command, waiting for the service to come up.
func (h *harness) request(subject string, body []byte) *nats.Msg {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		m, err := h.nc.Request(subject, body, 15*time.Second)
		if err == nil {
			return m
		}
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			h.t.Fatalf("request %s: %v", subject, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// command sends a JSON command and decodes the reply; a micro error fails
// the test.
func (h *harness) command(subject string, req any) command.RunReply {
	h.t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	m := h.request(subject, body)
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		h.t.Fatalf("%s: %s: %s", subject, code, m.Data)
	}
	var reply command.RunReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		h.t.Fatalf("%s reply %q: %v", subject, m.Data, err)
	}
	return reply
}

// start starts a run and returns its id.
func (h *harness) start(source string, inputs map[string]any, yes bool) string {
	h.t.Helper()
	var req command.StartRun
	req.Skill.Source, req.Skill.File = source, "test.yaml"
	req.Inputs, req.Yes, req.RequestedBy = inputs, yes, "user:test"
	reply := h.command(command.RunStart, req)
	if !events.ValidID(reply.RunID) || reply.Status != runstate.StatusRequested {
		h.t.Fatalf("start reply %+v", reply)
	}
	return reply.RunID
}

// log reads every event matching filter, in log order.
func (h *harness) log(filter string) []*events.Event {
	h.t.Helper()
	var out []*events.Event
	_, err := events.ReadLog(h.ctx(), h.bus.JetStream(), events.EventStream, []string{filter}, 0, func(raw events.RawMsg) error {
		ev, err := h.bus.Codec().DecodeStored(raw)
		if err != nil {
			return fmt.Errorf("invalid event in the log at %d (%s): %w", raw.Seq, raw.Subject, err)
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		h.t.Fatalf("read %s: %v", filter, err)
	}
	return out
}

func (h *harness) runLog(id string) []*events.Event {
	h.t.Helper()
	return h.log(events.SubjectFilter("run", id))
}

// waitRun polls the run's log until until is true.
func (h *harness) waitRun(id string, total time.Duration, what string, until func([]*events.Event) bool) []*events.Event {
	h.t.Helper()
	deadline := time.Now().Add(total)
	for {
		evs := h.runLog(id)
		if until(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("run %s: no %s after %s; log:\n%s", id, what, total, describe(evs))
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// waitEnd waits for the run to complete, fail or be cancelled and checks
// which.
func (h *harness) waitEnd(id string, want events.Type) []*events.Event {
	h.t.Helper()
	evs := h.waitRun(id, 30*time.Second, "end", func(evs []*events.Event) bool { return ended(evs) != "" })
	if got := ended(evs); got != want {
		h.t.Fatalf("run %s ended with %s, want %s; log:\n%s", id, got, want, describe(evs))
	}
	return evs
}

// ended is the run's last terminal event type ("" while it runs). A failed
// run may go on after a retry, so only the last one counts.
func ended(evs []*events.Event) events.Type {
	var last events.Type
	for _, ev := range evs {
		switch t := events.Type(ev.Type()); t {
		case events.RunCompleted, events.RunFailed, events.RunCancelled:
			last = t
		case events.RunResumed, events.RunStepStarted:
			last = ""
		}
	}
	return last
}

func hasType(t events.Type) func([]*events.Event) bool {
	return func(evs []*events.Event) bool { return len(ofType(evs, t)) > 0 }
}

func ofType(evs []*events.Event, t events.Type) []*events.Event {
	var out []*events.Event
	for _, ev := range evs {
		if events.Type(ev.Type()) == t {
			out = append(out, ev)
		}
	}
	return out
}

func describe(evs []*events.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %s %s %s\n", ev.Type(), ev.Source(), ev.Data())
	}
	return b.String()
}

// decode unmarshals an event's data.
func decode[T any](t testing.TB, ev *events.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ev.Data(), &v); err != nil {
		t.Fatalf("%s data %s: %v", ev.Type(), ev.Data(), err)
	}
	return v
}

// steps summarizes the step events as "type:index/attempt" in log order.
func steps(t testing.TB, evs []*events.Event) []string {
	t.Helper()
	var out []string
	type ref struct {
		Index   int `json:"index"`
		Attempt int `json:"attempt"`
	}
	for _, ev := range evs {
		switch events.Type(ev.Type()) {
		case events.RunStepStarted, events.RunStepCompleted, events.RunStepFailed:
			r := decode[ref](t, ev)
			out = append(out, fmt.Sprintf("%s:%d/%d", events.Type(ev.Type()).Verb(), r.Index, r.Attempt))
		case events.RunStepSkipped:
			out = append(out, fmt.Sprintf("step.skipped:%d", decode[ref](t, ev).Index))
		}
	}
	return out
}

// alive reports whether pid is a process that has not exited (a zombie
// counts as exited).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// consumerIdle waits until the runner's consumer has been handed every
// event up to seq and has acknowledged all of them.
func (h *harness) consumerIdle(seq uint64) {
	h.t.Helper()
	eventstest.CheckFor(h.t, 15*time.Second, 20*time.Millisecond, func() error {
		c, err := h.bus.JetStream().Consumer(h.ctx(), events.EventStream, runner.ConsumerName)
		if err != nil {
			return err
		}
		info, err := c.Info(h.ctx())
		if err != nil {
			return err
		}
		if info.Delivered.Stream < seq || info.NumPending > 0 || info.NumAckPending > 0 {
			return fmt.Errorf("runner consumer: delivered up to %d (want %d), %d pending, %d unacknowledged", info.Delivered.Stream, seq, info.NumPending, info.NumAckPending)
		}
		return nil
	})
}

// lastSeq is the event stream's last sequence.
func (h *harness) lastSeq() uint64 {
	h.t.Helper()
	s, err := h.bus.JetStream().Stream(h.ctx(), events.EventStream)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := s.Info(h.ctx())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.LastSeq
}

// deadLetters counts the messages in the dead-letter stream.
func (h *harness) deadLetters() uint64 {
	h.t.Helper()
	s, err := h.bus.JetStream().Stream(h.ctx(), events.DLQStream)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := s.Info(h.ctx())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Msgs
}

// startRun is harness.start for other goroutines: it returns an error
// instead of failing the test. The request carries a request id, so a
// retry after a lost reply starts the run once.
func startRun(h *harness, source string, inputs map[string]any) (string, error) {
	var req command.StartRun
	req.Skill.Source, req.Skill.File = source, "test.yaml"
	req.Inputs, req.RequestedBy = inputs, "user:test"
	req.RequestID = rand.Text()
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		m, err := h.nc.Request(command.RunStart, body, 10*time.Second)
		if err != nil {
			if (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout)) && time.Now().Before(deadline) {
				if errors.Is(err, nats.ErrTimeout) {
					h.t.Logf("start request %s timed out (test connection drops: %d); retrying", req.RequestID, h.drops.Load())
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return "", fmt.Errorf("start: %w", err)
		}
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			return "", fmt.Errorf("start: %s: %s", code, m.Data)
		}
		var reply command.RunReply
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			return "", err
		}
		return reply.RunID, nil
	}
}
