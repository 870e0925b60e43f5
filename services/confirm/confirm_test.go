package confirm_test

// Tests of the confirmation loop against a real embedded nats-server: the
// confirm router, the learner and the runner each run with their own
// runtime (connection, codec, bus), as they would in separate processes, and
// one test runs the router as a separate process that it kills. No mocks of
// NATS.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/learner"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// ---- services, each with its own runtime ----

type svc struct {
	t      *testing.T
	name   string
	rt     *service.Runtime
	runCtx context.Context
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// spec is a service to start: a name and its library entry point.
type spec struct {
	name string
	run  service.RunFunc
}

// start connects a runtime of its own for every service, then runs each
// until the test ends (or stop is called). Like heed up, all connect (and
// provision) first and each starts once the one before has set up (it
// registers a health check then): a stream update racing a consumer's
// creation is a data race inside nats-server.
func start(t *testing.T, env *eventstest.Env, specs ...spec) []*svc {
	t.Helper()
	var out []*svc
	for _, sp := range specs {
		ctx, cancel := context.WithCancel(context.Background())
		rt, err := service.Connect(ctx, sp.name, env.URL(), eventstest.Logger(t), events.DefaultTopology())
		if err != nil {
			cancel()
			t.Fatalf("connect %s: %v", sp.name, err)
		}
		s := &svc{t: t, name: sp.name, rt: rt, runCtx: ctx, cancel: cancel, done: make(chan error, 1)}
		t.Cleanup(s.stop)
		out = append(out, s)
	}
	for i, s := range out {
		go func() { s.done <- specs[i].run(s.runCtx, s.rt) }()
		eventstest.CheckFor(t, 30*time.Second, 5*time.Millisecond, func() error {
			if len(s.rt.Health().Checks) == 0 {
				return fmt.Errorf("%s has not started", s.name)
			}
			return nil
		})
	}
	return out
}

// stop cancels the service, waits for Run to return and closes its runtime.
func (s *svc) stop() {
	s.once.Do(func() {
		s.cancel()
		select {
		case err := <-s.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				s.t.Errorf("%s stopped with error: %v", s.name, err)
			}
		case <-time.After(20 * time.Second):
			s.t.Errorf("%s did not stop within 20s", s.name)
		}
		s.rt.Close()
	})
}

func router(cfg confirm.Config) spec {
	return spec{"confirm-router", func(ctx context.Context, rt *service.Runtime) error { return confirm.Run(ctx, rt, cfg) }}
}

var learnerSvc = spec{"learner", learner.Run}

var runnerSvc = spec{"runner", func(ctx context.Context, rt *service.Runtime) error {
	return runner.Run(ctx, rt, runner.Config{ToolsFile: "../../skills/tools.yaml"})
}}

// ---- log helpers ----

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// publish writes ev to the log (failing the test on error).
func publish(t *testing.T, bus *events.Bus, ev events.Event, opts ...events.PublishOption) {
	t.Helper()
	if _, err := bus.Publish(ctxFor(t, 10*time.Second), &ev, opts...); err != nil {
		t.Fatalf("publish %s %s: %v", ev.Type(), ev.ID(), err)
	}
}

func newEvent(t *testing.T, typ events.Type, id, eventID, source string, data any) events.Event {
	t.Helper()
	ev, err := events.NewEvent(typ, id, eventID, source, data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

var proceedCancel = []events.Option{
	{Label: "Proceed", Value: "proceed", Description: "go ahead"},
	{Label: "Cancel", Value: "cancel", Description: "stop here"},
}

// ask publishes a confirmation request as heed.confirm.requested and
// returns the event.
func ask(t *testing.T, bus *events.Bus, id string, req events.ConfirmRequestedData) events.Event {
	t.Helper()
	if req.Message == "" {
		req.Message = "May I go ahead with " + id + "?"
	}
	if req.Options == nil {
		req.Options = proceedCancel
	}
	if req.Requester == "" {
		req.Requester = "test-agent"
	}
	ev := newEvent(t, events.ConfirmRequested, id, id+"/requested", "test/agent", req)
	publish(t, bus, ev)
	return ev
}

// logOf returns every event of one aggregate (kind "confirm", "run" or
// "pref") in log order, leaving out messages that are not valid events.
func logOf(t *testing.T, bus *events.Bus, kind, id string) []*events.Event {
	t.Helper()
	var out []*events.Event
	_, err := events.ReadLog(ctxFor(t, 10*time.Second), bus.JetStream(), events.EventStream, []string{events.SubjectFilter(kind, id)}, 0, func(raw events.RawMsg) error {
		if ev, err := bus.Codec().DecodeStored(raw); err == nil {
			out = append(out, ev)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read heed.%s.%s.>: %v", kind, id, err)
	}
	return out
}

func ofType(evs []*events.Event, typ events.Type) []*events.Event {
	var out []*events.Event
	for _, ev := range evs {
		if events.Type(ev.Type()) == typ {
			out = append(out, ev)
		}
	}
	return out
}

func types(evs []*events.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, strings.TrimPrefix(ev.Type(), "heed."))
	}
	return out
}

func decode[T any](t *testing.T, ev *events.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ev.Data(), &v); err != nil {
		t.Fatalf("decode %s %s: %v", ev.Type(), ev.ID(), err)
	}
	return v
}

// waitFor polls the confirmation's log until an event of typ appears and
// returns it.
func waitFor(t *testing.T, bus *events.Bus, id string, typ events.Type, within time.Duration) *events.Event {
	t.Helper()
	var found *events.Event
	eventstest.CheckFor(t, within, 20*time.Millisecond, func() error {
		evs := logOf(t, bus, "confirm", id)
		if got := ofType(evs, typ); len(got) > 0 {
			found = got[0]
			return nil
		}
		return fmt.Errorf("confirmation %s has no %s event; its log: %v", id, typ, types(evs))
	})
	return found
}

// waitAnswer waits for the confirmation's answer.
func waitAnswer(t *testing.T, bus *events.Bus, id string) (*events.Event, events.ConfirmAnsweredData) {
	t.Helper()
	ev := waitFor(t, bus, id, events.ConfirmAnswered, 10*time.Second)
	return ev, decode[events.ConfirmAnsweredData](t, ev)
}

// scheduled returns the pending deadline of a confirmation, if any.
func scheduled(t *testing.T, bus *events.Bus, id string) (*jetstream.RawStreamMsg, bool) {
	t.Helper()
	ctx := ctxFor(t, 5*time.Second)
	s, err := bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, confirmation.ScheduleSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("get %s: %v", confirmation.ScheduleSubject(id), err)
	}
	return m, true
}

// waitAsked waits until the router has routed the request to people: its
// deadline is in the stream. It then requires that nothing answered it.
func waitAsked(t *testing.T, bus *events.Bus, id string) {
	t.Helper()
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, ok := scheduled(t, bus, id); !ok {
			evs := logOf(t, bus, "confirm", id)
			if got := ofType(evs, events.ConfirmAnswered); len(got) != 0 {
				t.Fatalf("confirmation %s was answered without asking anyone: %s", id, got[0].Data())
			}
			return fmt.Errorf("no deadline scheduled for %s; its log: %v", id, types(evs))
		}
		return nil
	})
	// The router routes a request once: it answers it or schedules its
	// deadline, publishes what it wrote and only then acknowledges the
	// request. Once its consumer has acknowledged the request, only the
	// deadline can answer it; look then.
	req := lastOn(t, bus, "heed.confirm."+id+".requested")
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if ci := consumerInfo(t, bus, confirm.ConsumerName); ci.AckFloor.Stream < req.Sequence {
			return fmt.Errorf("the router has not acknowledged the request of %s (seq %d; ack floor %d)", id, req.Sequence, ci.AckFloor.Stream)
		}
		return nil
	})
	if got := ofType(logOf(t, bus, "confirm", id), events.ConfirmAnswered); len(got) != 0 {
		t.Fatalf("confirmation %s was answered without asking anyone: %s", id, got[0].Data())
	}
}

// lastOn is the last message stored on subject in the event stream.
func lastOn(t *testing.T, bus *events.Bus, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx := ctxFor(t, 5*time.Second)
	s, err := bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("get %s: %v", subject, err)
	}
	return m
}

func consumerInfo(t *testing.T, bus *events.Bus, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := ctxFor(t, 5*time.Second)
	c, err := bus.JetStream().Consumer(ctx, events.EventStream, name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer %s info: %v", name, err)
	}
	return ci
}

// waitRouterIdle waits until the router's durable consumers have nothing
// pending and nothing unacknowledged. The router publishes what it writes
// for an input before it acknowledges the input, so from then on it has
// written all it ever will about what is in the log.
func waitRouterIdle(t *testing.T, bus *events.Bus) {
	t.Helper()
	eventstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, name := range []string{confirm.ConsumerName, confirm.AnswersConsumerName, confirm.DeadlineConsumerName} {
			if ci := consumerInfo(t, bus, name); ci.NumPending != 0 || ci.NumAckPending != 0 {
				return fmt.Errorf("consumer %s: %d pending, %d unacknowledged", name, ci.NumPending, ci.NumAckPending)
			}
		}
		return nil
	})
}

// witnessDeadline asks confirmation witness, with a deadline no earlier
// than at, and waits until the router has answered it with its default at
// that deadline. The server fires due schedules in the order it stored
// them, so by then every deadline scheduled before the witness's and due
// no later has fired: a deadline that has not fired by then never will.
func witnessDeadline(t *testing.T, bus *events.Bus, witness string, at time.Time) {
	t.Helper()
	// The router's shortest deadline is 1 s (Config.MinTimeout).
	timeout := max(time.Until(at)+100*time.Millisecond, time.Second)
	ask(t, bus, witness, events.ConfirmRequestedData{TimeoutS: timeout.Seconds(), Default: "cancel"})
	ev := waitFor(t, bus, witness, events.ConfirmAnswered, timeout+10*time.Second)
	if a := decode[events.ConfirmAnsweredData](t, ev); a.Method != events.MethodTimeout {
		t.Fatalf("the witness %s was answered %+v, want its default at its deadline", witness, a)
	}
}

// answerEventID returns the id of the confirmation's (only) answer event.
func answerEventID(t *testing.T, bus *events.Bus, id string) string {
	t.Helper()
	got := ofType(logOf(t, bus, "confirm", id), events.ConfirmAnswered)
	if len(got) != 1 {
		t.Fatalf("confirmation %s has %d answered events, want 1", id, len(got))
	}
	return got[0].ID()
}

// prefsKV returns the learner's preference bucket.
func prefsKV(t *testing.T, bus *events.Bus) jetstream.KeyValue {
	t.Helper()
	var kv jetstream.KeyValue
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		var err error
		kv, err = bus.JetStream().KeyValue(ctxFor(t, 5*time.Second), readmodel.PrefsBucket)
		return err
	})
	return kv
}

// waitPref waits until the bucket holds a live preference at key.
func waitPref(t *testing.T, kv jetstream.KeyValue, key string) (readmodel.Pref, uint64) {
	t.Helper()
	var p readmodel.Pref
	var rev uint64
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		e, err := kv.Get(ctxFor(t, 5*time.Second), key)
		if err != nil {
			return fmt.Errorf("%s key %s: %w", readmodel.PrefsBucket, key, err)
		}
		var ok bool
		if ok = readmodel.Decode(e.Value(), &p); !ok {
			return fmt.Errorf("%s key %s holds no live preference: %s", readmodel.PrefsBucket, key, e.Value())
		}
		rev = e.Revision()
		return nil
	})
	return p, rev
}

// waitForgotten waits until the preference at key is gone.
func waitForgotten(t *testing.T, kv jetstream.KeyValue, key string) {
	t.Helper()
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		e, err := kv.Get(ctxFor(t, 5*time.Second), key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if readmodel.Decode(e.Value(), &readmodel.Pref{}) {
			return fmt.Errorf("preference %s is still live: %s", key, e.Value())
		}
		return nil
	})
}

// forget publishes heed.pref.<key>.forgotten exactly as `heed prefs forget`
// does.
func forget(t *testing.T, bus *events.Bus, key string, rev uint64) {
	t.Helper()
	publish(t, bus, newEvent(t, events.PrefForgotten, key, fmt.Sprintf("%s/forget/%d", key, rev), "heed/cli", events.PrefForgottenData{By: "user:tester", Reason: "test"}))
}

// ---- a) the first answer wins ----

// Of 100 answers racing from 100 connections exactly one is stored; every
// other caller learns who answered, when and with what.
func TestConcurrentAnswersExactlyOneWins(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	const id, n = "c-race", 100
	opts := []events.Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}, {Label: "Wait", Value: "wait"}, {Label: "Skip", Value: "skip"}}
	ask(t, env.Bus(t), id, events.ConfirmRequestedData{Options: opts, Default: "cancel", TimeoutS: 3600})

	buses := make([]*events.Bus, n)
	for i := range buses {
		buses[i] = env.Bus(t) // a connection of its own each
	}
	type result struct {
		st  *confirmation.State
		err error
		a   events.ConfirmAnsweredData
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := events.ConfirmAnsweredData{Choice: opts[i%len(opts)].Value, Method: events.MethodUser, By: fmt.Sprintf("user:u%03d", i), Channel: "test"}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			<-start
			st, err := confirmation.Answer(ctx, buses[i], "test/answerer", id, a)
			results[i] = result{st, err, a}
		}()
	}
	close(start)
	wg.Wait()

	evs := logOf(t, env.Bus(t), "confirm", id)
	answered := ofType(evs, events.ConfirmAnswered)
	if len(answered) != 1 {
		t.Fatalf("the log holds %d answered events, want exactly 1: %v", len(answered), types(evs))
	}
	stored := decode[events.ConfirmAnsweredData](t, answered[0])
	storedAt := answered[0].Time()

	winners, refused := 0, 0
	for i, r := range results {
		var already *confirmation.AlreadyAnswered
		switch {
		case r.err == nil:
			winners++
			if r.a.By != stored.By || r.a.Choice != stored.Choice || stored.Method != events.MethodUser {
				t.Errorf("caller %d succeeded with %s/%s but the log holds %+v", i, r.a.By, r.a.Choice, stored)
			}
			if r.st == nil || r.st.Answer == nil || r.st.Answer.Choice != stored.Choice || !r.st.AnsweredAt.Equal(storedAt) {
				t.Errorf("caller %d: returned state %+v does not match the stored answer %+v at %s", i, r.st, stored, storedAt)
			}
		case errors.As(r.err, &already):
			refused++
			if already.ID != id || already.Winner.By != stored.By || already.Winner.Choice != stored.Choice || already.Winner.Method != stored.Method || !already.Winner.At.Equal(storedAt) {
				t.Errorf("caller %d: %+v does not describe the stored answer %+v at %s", i, already, stored, storedAt)
			}
			msg := r.err.Error()
			for _, want := range []string{id, stored.By, fmt.Sprintf("%q", stored.Choice), storedAt.UTC().Format("2006-01-02T15:04:05.000Z")} {
				if !strings.Contains(msg, want) {
					t.Errorf("caller %d: error %q does not name %q", i, msg, want)
				}
			}
			if !errors.Is(r.err, events.ErrConflict) {
				t.Errorf("caller %d: errors.Is(%v, ErrConflict) = false", i, r.err)
			}
		default:
			t.Errorf("caller %d: unexpected error %v", i, r.err)
		}
	}
	if winners != 1 || refused != n-1 {
		t.Fatalf("%d answers succeeded and %d were refused as already answered; want 1 and %d", winners, refused, n-1)
	}
	// A late answer is refused the same way.
	_, err := confirmation.Answer(ctxFor(t, 10*time.Second), env.Bus(t), "test/late", id, events.ConfirmAnsweredData{Choice: "skip", Method: events.MethodUser, By: "user:late"})
	var already *confirmation.AlreadyAnswered
	if !errors.As(err, &already) || already.Winner.By != stored.By {
		t.Fatalf("late answer: %v, want already answered by %s", err, stored.By)
	}
}

// ---- b) deadlines ----

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

// routerProc is heed-confirm-router running as a process of its own.
type routerProc struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
	mu     *sync.Mutex
	done   chan struct{}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func buildRouter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "heed-confirm-router")
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "./cmd/heed-confirm-router")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build heed-confirm-router: %v\n%s", err, out)
	}
	return bin
}

func startRouterProc(t *testing.T, bin, url string) *routerProc {
	t.Helper()
	p := &routerProc{stderr: &strings.Builder{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "--nats-url", url, "--log-level", "debug")
	p.cmd.Stderr = lockedWriter{p.mu, p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start heed-confirm-router: %v", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("--- heed-confirm-router (pid %d) stderr ---\n%s", p.cmd.Process.Pid, p.stderr.String())
			p.mu.Unlock()
		}
	})
	return p
}

// kill ends the process at once, like a crash: no drain, nothing flushed.
func (p *routerProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// waitHealthy waits until the router answers its health check.
func waitHealthy(t *testing.T, nc *nats.Conn, p *routerProc) {
	t.Helper()
	eventstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-p.done:
			t.Fatalf("heed-confirm-router exited: %v", p.cmd.ProcessState)
		default:
		}
		_, err := nc.Request(service.HealthSubject("confirm-router"), nil, time.Second)
		return err
	})
}

// A deadline lives in the stream: it fires while no router runs, and the
// next router applies the default exactly once.
func TestDeadlineSurvivesRouterCrash(t *testing.T) {
	t.Parallel()
	bin := buildRouter(t)
	env := eventstest.Start(t)
	bus := env.Bus(t)
	nc := env.Conn(t)
	const id = "c-deadline"

	first := startRouterProc(t, bin, env.URL())
	waitHealthy(t, nc, first)
	// A deadline of 5 s: room on a loaded machine to schedule it and kill
	// the router before it fires.
	req := ask(t, bus, id, events.ConfirmRequestedData{TimeoutS: 5, Default: "cancel"})
	t0 := req.Time()

	// The router schedules the deadline, then dies at about 2 s.
	eventstest.CheckFor(t, 4*time.Second, 10*time.Millisecond, func() error {
		if _, ok := scheduled(t, bus, id); !ok {
			return errors.New("no deadline scheduled yet")
		}
		return nil
	})
	time.Sleep(time.Until(t0.Add(2 * time.Second)))
	if time.Since(t0) > 4500*time.Millisecond {
		t.Fatalf("the router took %s to schedule the deadline; too slow to kill it before the deadline", time.Since(t0))
	}
	first.kill()
	if evs := logOf(t, bus, "confirm", id); len(evs) != 1 {
		t.Fatalf("before the deadline the confirmation's log is %v, want only the request", types(evs))
	}

	// With no router, the stream fires the deadline at 5 s (a plain
	// message on heed.schedule.fired.confirm.<id>, not an event), and
	// nobody answers.
	var fired *jetstream.RawStreamMsg
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if fired = firedDeadline(t, bus, id); fired == nil {
			return fmt.Errorf("the stream has not fired the deadline %s after the request", time.Since(t0).Round(time.Millisecond))
		}
		return nil
	})
	if d := fired.Time.Sub(t0); d < 5*time.Second {
		t.Errorf("the deadline fired %s after the request, want 5 s", d)
	}
	evs := logOf(t, bus, "confirm", id)
	if len(evs) != 1 {
		t.Fatalf("with no router running, the confirmation's log once the deadline fired is %v, want only the request", types(evs))
	}
	if fired.Header.Get("ce-specversion") != "" || fired.Header.Get("ce-type") != "" {
		t.Errorf("the fired deadline looks like a CloudEvent: %v", fired.Header)
	}
	if _, ok := scheduled(t, bus, id); ok {
		t.Errorf("the schedule is still in the stream after it fired")
	}

	// A new router turns it into the expired event and applies the default.
	second := startRouterProc(t, bin, env.URL())
	waitHealthy(t, nc, second)
	_, a := waitAnswer(t, bus, id)
	if a.Method != events.MethodTimeout || a.Choice != "cancel" || a.By != confirm.Source {
		t.Errorf("answer after restart = %+v, want the default cancel with method timeout by %s", a, confirm.Source)
	}
	evs = logOf(t, bus, "confirm", id)
	expired := ofType(evs, events.ConfirmExpired)
	if len(expired) != 1 {
		t.Fatalf("log of %s = %v; want one expired event", id, types(evs))
	}
	exp := decode[events.ConfirmExpiredData](t, expired[0])
	if exp.Default != "cancel" || exp.Deadline.Sub(t0).Round(time.Millisecond) != 5*time.Second {
		t.Errorf("expired event = %+v; want default cancel and a deadline 5s after the request at %s", exp, t0)
	}
	if expired[0].ID() != id+"/expired" {
		t.Errorf("expired event id %q, want the deterministic %q", expired[0].ID(), id+"/expired")
	}
	if at := expired[0].Time(); !at.Equal(fired.Time) {
		t.Errorf("expired event time %s, want the time the deadline fired %s", at, fired.Time)
	}
	// Exactly once, even with the router running on (and a third one
	// starting over the same durable consumers): the second router has
	// acknowledged everything before it is killed, and the third applies a
	// later deadline (so it has read past everything before it) and has
	// acknowledged everything too, before the log is read.
	waitRouterIdle(t, bus)
	second.kill()
	third := startRouterProc(t, bin, env.URL())
	waitHealthy(t, nc, third)
	witnessDeadline(t, bus, id+"-witness", time.Now())
	waitRouterIdle(t, bus)
	evs = logOf(t, bus, "confirm", id)
	if len(ofType(evs, events.ConfirmAnswered)) != 1 || len(ofType(evs, events.ConfirmExpired)) != 1 || len(evs) != 3 {
		t.Fatalf("log of %s = %v; want requested, expired, answered once each", id, types(evs))
	}
}

// firedDeadline is the message the stream stored when the deadline of
// confirmation id fired, if it did.
func firedDeadline(t *testing.T, bus *events.Bus, id string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx := ctxFor(t, 5*time.Second)
	s, err := bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, confirmation.FiredSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", confirmation.FiredSubject(id), err)
	}
	return m
}

// An answer before the deadline purges the schedule in the same write: the
// deadline never fires.
func TestAnswerBeforeDeadlineCancelsIt(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{}))
	bus := env.Bus(t)
	const id = "c-early"
	// 5 s: the answer must land before the deadline on a loaded machine.
	req := ask(t, bus, id, events.ConfirmRequestedData{TimeoutS: 5, Default: "cancel"})
	t0 := req.Time()
	eventstest.CheckFor(t, 4*time.Second, 10*time.Millisecond, func() error {
		if _, ok := scheduled(t, bus, id); !ok {
			return errors.New("no deadline scheduled yet")
		}
		return nil
	})
	time.Sleep(time.Until(t0.Add(500 * time.Millisecond)))
	if _, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "test", id, events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "user:early"}); err != nil {
		t.Fatalf("answer at 0.5 s: %v", err)
	}
	if _, ok := scheduled(t, bus, id); ok {
		t.Errorf("the deadline is still scheduled after the answer")
	}
	// A witness whose deadline falls after this one's has been applied:
	// had this deadline not been purged, it would have fired by then.
	witnessDeadline(t, bus, id+"-witness", t0.Add(5*time.Second))
	if fired := firedDeadline(t, bus, id); fired != nil {
		t.Errorf("the deadline fired at %s although the answer purged it", fired.Time)
	}
	waitRouterIdle(t, bus)
	evs := logOf(t, bus, "confirm", id)
	if len(evs) != 2 || len(ofType(evs, events.ConfirmExpired)) != 0 {
		t.Fatalf("log of %s after its deadline = %v; want requested and answered only (no expired)", id, types(evs))
	}
	if a := decode[events.ConfirmAnsweredData](t, evs[1]); a.Choice != "proceed" || a.By != "user:early" {
		t.Errorf("answer = %+v", a)
	}
}

// A message on a confirmation's subjects that is not a valid event (any
// client can publish one; the gate dead-letters it) still moves the
// subject's last sequence: it must not make the confirmation unanswerable
// or its deadline impossible to schedule.
func TestInvalidMessageDoesNotBlockAConfirmation(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	bus := env.Bus(t)
	garbage := func(id string) {
		t.Helper()
		if _, err := bus.JetStream().Publish(ctxFor(t, 5*time.Second), events.ConfirmAnswered.Subject(id), []byte("proceed!!")); err != nil {
			t.Fatal(err)
		}
	}
	// Before the router sees the request: it must still schedule the
	// deadline, and the deadline must answer.
	req := ask(t, bus, "c-junk-deadline", events.ConfirmRequestedData{TimeoutS: 1, Default: "cancel"})
	garbage("c-junk-deadline")
	ask(t, bus, "c-junk-answer", events.ConfirmRequestedData{TimeoutS: 600, Default: "cancel"})
	garbage("c-junk-answer")
	start(t, env, router(confirm.Config{}))

	st, err := confirmation.Answer(ctxFor(t, 20*time.Second), bus, "test", "c-junk-answer", events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "user:carol"})
	if err != nil || st.Answer == nil || st.Answer.By != "user:carol" {
		t.Fatalf("answer after an invalid message: %+v, %v", st, err)
	}
	if got := ofType(logOf(t, bus, "confirm", "c-junk-answer"), events.ConfirmAnswered); len(got) != 1 {
		t.Errorf("%d answered events, want 1", len(got))
	}

	ev, a := waitAnswer(t, bus, "c-junk-deadline")
	if a.Method != events.MethodTimeout || a.Choice != "cancel" || ev.Time().Before(req.Time().Add(time.Second)) {
		t.Errorf("answer = %+v at %s; want the default by timeout, after the 1 s deadline", a, ev.Time())
	}
}

// ---- c) layers ----

const rulesYAML = `
rules:
  - name: stage auto-proceeds
    when: inputs.environment == "stage"
    answer: proceed
  - name: production always asks
    skill: release
    when: inputs.environment == "production"
    ask: true
`

func TestLayers(t *testing.T) {
	t.Parallel()
	rules, err := confirm.ParseRules("rules.yaml", []byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{Rules: rules}), learnerSvc)
	bus := env.Bus(t)
	inputs := func(env string) map[string]any { return map[string]any{"inputs": map[string]any{"environment": env}} }

	t.Run("override", func(t *testing.T) {
		// Cancel first: --yes must pick the proceed option, not the first.
		opts := []events.Option{{Label: "Cancel", Value: "cancel"}, {Label: "Go ahead", Value: "proceed"}}
		ask(t, bus, "c-yes", events.ConfirmRequestedData{Options: opts, Default: "cancel", Yes: true, RunID: "run-yes"})
		_, a := waitAnswer(t, bus, "c-yes")
		if a.Method != events.MethodOverride || a.Choice != "proceed" || a.By != confirm.Source || a.RunID != "run-yes" {
			t.Errorf("answer = %+v; want proceed, method override, by %s, run run-yes", a, confirm.Source)
		}
		if _, ok := scheduled(t, bus, "c-yes"); ok {
			t.Errorf("an overridden request still got a deadline")
		}
	})

	t.Run("rule answers", func(t *testing.T) {
		ask(t, bus, "c-stage", events.ConfirmRequestedData{Skill: "deploy", Step: "rollout", Default: "cancel", TimeoutS: 600, Context: inputs("stage")})
		_, a := waitAnswer(t, bus, "c-stage")
		if a.Method != events.MethodMemory || a.Choice != "proceed" || a.Reason != "rule: stage auto-proceeds" {
			t.Errorf("answer = %+v; want proceed, method memory, reason naming the rule", a)
		}
		// The same request elsewhere is asked.
		ask(t, bus, "c-qa", events.ConfirmRequestedData{Skill: "deploy", Step: "rollout", Default: "cancel", TimeoutS: 600, Context: inputs("qa")})
		waitAsked(t, bus, "c-qa")
	})

	kv := prefsKV(t, bus)
	prefKey := events.PrefID(events.ScopeSkillStep, "release", "confirm")
	var teacher string
	t.Run("learned preference", func(t *testing.T) {
		req := events.ConfirmRequestedData{Skill: "release", Step: "confirm", Default: "cancel", TimeoutS: 600, LearnPreference: true, Context: inputs("qa")}
		ask(t, bus, "c-learn-1", req)
		waitAsked(t, bus, "c-learn-1")
		if _, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "test", "c-learn-1", events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "user:alice", Remember: "skill_step"}); err != nil {
			t.Fatal(err)
		}
		teacher = answerEventID(t, bus, "c-learn-1")
		if p, _ := waitPref(t, kv, prefKey); p.LearnedFrom != teacher || p.Choice != "proceed" {
			t.Fatalf("preference = %+v; want proceed learned from %s", p, teacher)
		}
		ask(t, bus, "c-learn-2", req)
		_, a := waitAnswer(t, bus, "c-learn-2")
		if a.Method != events.MethodMemory || a.Choice != "proceed" || a.LearnedFrom != teacher || !strings.Contains(a.Reason, prefKey) || !strings.Contains(a.Reason, "user:alice") {
			t.Errorf("answer = %+v; want proceed from memory, learned_from %s, reason naming %s and user:alice", a, teacher, prefKey)
		}
		// Without learn_preference the preference does not apply.
		req.LearnPreference = false
		ask(t, bus, "c-learn-3", req)
		waitAsked(t, bus, "c-learn-3")
	})

	t.Run("ask rule suppresses the preference", func(t *testing.T) {
		if teacher == "" {
			t.Skip("needs the learned preference")
		}
		ask(t, bus, "c-prod", events.ConfirmRequestedData{Skill: "release", Step: "confirm", Default: "cancel", TimeoutS: 600, LearnPreference: true, Context: inputs("production")})
		waitAsked(t, bus, "c-prod")
		// The preference is still there: it was the rule that asked.
		waitPref(t, kv, prefKey)
	})

	t.Run("ai_assist delegates to the agent", func(t *testing.T) {
		ctxData := map[string]any{"recent_steps": []any{map[string]any{"step": "check", "status": "completed"}}, "variables": map[string]any{"image": "quay.io/x:abc"}}
		ask(t, bus, "c-ai", events.ConfirmRequestedData{AIAssist: true, Agent: "agent-7", RunID: "run-ai", Skill: "release", Step: "review", Default: "cancel", TimeoutS: 600, Context: ctxData})
		del := waitFor(t, bus, "c-ai", events.ConfirmDelegated, 10*time.Second)
		d := decode[events.ConfirmDelegatedData](t, del)
		wantCtx, _ := json.Marshal(ctxData)
		gotCtx, _ := json.Marshal(d.Context)
		if d.Agent != "agent-7" || d.RunID != "run-ai" || d.Skill != "release" || d.Step != "review" || d.Default != "cancel" || len(d.Options) != 2 || string(gotCtx) != string(wantCtx) {
			t.Errorf("delegated = %+v (context %s); want agent-7, run-ai, the options, default and context %s", d, gotCtx, wantCtx)
		}
		if d.Deadline.Sub(del.Time()) < 590*time.Second || !strings.Contains(d.Question, "heed continue run-ai") {
			t.Errorf("delegated deadline %s / question %q", d.Deadline, d.Question)
		}
		if got := ofType(logOf(t, bus, "confirm", "c-ai"), events.ConfirmAnswered); len(got) != 0 {
			t.Fatalf("delegated and answered: %s", got[0].Data())
		}
		st, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "agent-7", "c-ai", events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodAgent, By: "agent:agent-7", Reason: "image exists"})
		if err != nil || st.Answer.Method != events.MethodAgent {
			t.Fatalf("agent answer: %+v, %v", st, err)
		}
		_, a := waitAnswer(t, bus, "c-ai")
		if a.Method != events.MethodAgent || a.By != "agent:agent-7" || a.RunID != "run-ai" {
			t.Errorf("stored answer = %+v", a)
		}
		// Without an agent there is nobody to delegate to.
		ask(t, bus, "c-ai-noagent", events.ConfirmRequestedData{AIAssist: true, Default: "cancel", TimeoutS: 600})
		waitAsked(t, bus, "c-ai-noagent")
		if got := ofType(logOf(t, bus, "confirm", "c-ai-noagent"), events.ConfirmDelegated); len(got) != 0 {
			t.Errorf("delegated with no agent: %s", got[0].Data())
		}
	})
}

// ---- d) remembered choices ----

func TestRememberAndForget(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{}), learnerSvc)
	bus := env.Bus(t)
	kv := prefsKV(t, bus)
	req := events.ConfirmRequestedData{Skill: "rotate_keys", Step: "approve", Default: "cancel", TimeoutS: 600, LearnPreference: true}
	key := events.PrefID(events.ScopeSkillStep, "rotate_keys", "approve")

	ask(t, bus, "q1", req)
	waitAsked(t, bus, "q1")
	if _, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "test", "q1", events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "user:bob", Remember: "skill_step"}); err != nil {
		t.Fatal(err)
	}
	teacher := answerEventID(t, bus, "q1")

	var set events.PrefSetData
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		evs := ofType(logOf(t, bus, "pref", key), events.PrefSet)
		if len(evs) != 1 {
			return fmt.Errorf("%d heed.pref.%s.set events, want 1", len(evs), key)
		}
		set = decode[events.PrefSetData](t, evs[0])
		return nil
	})
	if set.Scope != events.ScopeSkillStep || set.Skill != "rotate_keys" || set.Step != "approve" || set.Choice != "proceed" || set.By != "user:bob" || set.LearnedFrom != teacher || set.ConfirmID != "q1" {
		t.Errorf("pref.set = %+v; want skill_step rotate_keys/approve, proceed, by user:bob, learned from %s, confirm q1", set, teacher)
	}
	p, rev := waitPref(t, kv, key)
	if p.ID != key || p.Choice != "proceed" || p.Skill != "rotate_keys" || p.Step != "approve" {
		t.Errorf("stored preference = %+v", p)
	}

	ask(t, bus, "q2", req)
	_, a := waitAnswer(t, bus, "q2")
	if a.Method != events.MethodMemory || a.Choice != "proceed" || a.LearnedFrom != teacher {
		t.Errorf("q2 answer = %+v; want proceed from memory learned from %s", a, teacher)
	}

	forget(t, bus, key, rev)
	waitForgotten(t, kv, key)
	ask(t, bus, "q3", req)
	waitAsked(t, bus, "q3")

	// "Ask again" on an answer revokes the preference too.
	if _, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "test", "q3", events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "user:bob", Remember: "skill_step"}); err != nil {
		t.Fatal(err)
	}
	waitPref(t, kv, key)
	noLearn := req
	noLearn.LearnPreference = false
	ask(t, bus, "q4", noLearn)
	waitAsked(t, bus, "q4")
	if _, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "test", "q4", events.ConfirmAnsweredData{Choice: "cancel", Method: events.MethodUser, By: "user:bob", Remember: "ask_again"}); err != nil {
		t.Fatal(err)
	}
	waitForgotten(t, kv, key)
	ask(t, bus, "q5", req)
	waitAsked(t, bus, "q5")

	// A choice remembered for a tool's error applies to the same error
	// with other hashes and numbers in it.
	errReq := func(msg string) events.ConfirmRequestedData {
		return events.ConfirmRequestedData{Default: "cancel", TimeoutS: 600, LearnPreference: true,
			Options: []events.Option{{Label: "Retry", Value: "retry"}, {Label: "Cancel", Value: "cancel"}},
			Context: map[string]any{"tool": "quay_check", "error": msg}}
	}
	ask(t, bus, "e1", errReq("manifest unknown: quay.io/app-sre/backend:abc1234 (attempt 1)"))
	waitAsked(t, bus, "e1")
	if _, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "test", "e1", events.ConfirmAnsweredData{Choice: "retry", Method: events.MethodUser, By: "user:bob", Remember: "error"}); err != nil {
		t.Fatal(err)
	}
	errKey := events.PrefID(events.ScopeError, "quay_check", events.ErrorSignature("manifest unknown: quay.io/app-sre/backend:abc1234 (attempt 1)"))
	if p, _ := waitPref(t, kv, errKey); p.Scope != events.ScopeError || p.Tool != "quay_check" || p.Choice != "retry" {
		t.Errorf("error preference = %+v", p)
	}
	ask(t, bus, "e2", errReq("manifest unknown: quay.io/app-sre/backend:def5678 (attempt 2)"))
	if _, a := waitAnswer(t, bus, "e2"); a.Method != events.MethodMemory || a.Choice != "retry" {
		t.Errorf("e2 answer = %+v; want retry from memory", a)
	}
	ask(t, bus, "e3", errReq("connection refused"))
	waitAsked(t, bus, "e3")

	rep, err := events.Replay(ctxFor(t, 60*time.Second), bus, learner.PrefsProjection{}, events.DefaultTopology())
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	// The step's preference was forgotten (twice): its key is removed, not
	// kept as a tombstone; the error's preference remains.
	if !rep.Identical() || rep.Events != 5 || rep.Keys != 1 {
		t.Errorf("replay = %+v; want identical, 5 events, 1 key", rep)
	}
}

// ---- e) the direct request command ----

func TestRequestCommandValidates(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{}))
	bus := env.Bus(t)
	nc := env.Conn(t)

	send := func(body []byte) *nats.Msg {
		t.Helper()
		var m *nats.Msg
		eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			var err error
			m, err = nc.Request(command.ConfirmRequest, body, 5*time.Second)
			return err // no responders until the router is up
		})
		return m
	}
	body := func(id string, mutate func(*command.RequestConfirmation)) []byte {
		r := command.RequestConfirmation{ID: id}
		r.Message, r.Options, r.Default, r.TimeoutS = "Delete 3 branches?", proceedCancel, "cancel", 120
		if mutate != nil {
			mutate(&r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	streamMsgs := func() uint64 {
		s, err := bus.JetStream().Stream(ctxFor(t, 5*time.Second), events.EventStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctxFor(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	before := streamMsgs()

	for _, c := range []struct {
		name, id string
		body     []byte
		want     string
	}{
		{"empty message", "bad-empty", body("bad-empty", func(r *command.RequestConfirmation) { r.Message = "  " }), "empty message"},
		{"over-long message", "bad-long", body("bad-long", func(r *command.RequestConfirmation) { r.Message = strings.Repeat("x", confirmation.MaxMessageBytes+1) }),
			fmt.Sprintf("message is %d bytes; the limit is %d", confirmation.MaxMessageBytes+1, confirmation.MaxMessageBytes)},
		{"control characters", "bad-bell", body("bad-bell", func(r *command.RequestConfirmation) { r.Message = "ring the \x07 bell?" }), "control characters"},
		{"escape sequence in the title", "bad-title", body("bad-title", func(r *command.RequestConfirmation) { r.Title = "Deploy\x1b[2J" }), "title contains control characters"},
		{"carriage return in an option", "bad-label", body("bad-label", func(r *command.RequestConfirmation) {
			r.Options = []events.Option{{Label: "Cancel\r1) Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}}
		}), `option "proceed" contains control characters`},
		{"negative timeout", "bad-timeout", body("bad-timeout", func(r *command.RequestConfirmation) { r.TimeoutS = -5 }), "timeout_s"},
		{"duplicate options", "bad-dup", body("bad-dup", func(r *command.RequestConfirmation) {
			r.Options = []events.Option{{Label: "Proceed", Value: "proceed"}, {Label: "Go", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}}
		}), "option value proceed appears twice"},
		{"default not an option", "bad-default", body("bad-default", func(r *command.RequestConfirmation) { r.Default = "maybe" }), "default maybe is not one of the options"},
		{"no options", "bad-noopts", body("bad-noopts", func(r *command.RequestConfirmation) { r.Options = nil }), "at /options: expected array, but got null"},
		{"unknown field", "bad-unknown", []byte(`{"id":"bad-unknown","message":"Deploy?","options":[{"label":"Proceed","value":"proceed"}],"priority":"high"}`), `'priority' not allowed`},
		{"invalid id", "bad", body("bad.id", nil), `at /id: does not match pattern`},
		{"a service's name as requester", "bad-runner", body("bad-runner", func(r *command.RequestConfirmation) {
			r.Requester = "heed/runner"
			r.Skill, r.Step = "prod_db", "truncate"
		}),
			`requester "heed/runner": names beginning "heed/" are heed's services'`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := send(c.body)
			code, desc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
			if code != string(events.CodeInvalidRequest) {
				t.Fatalf("reply code %q (%q, body %.200s); want %s", code, desc, m.Data, events.CodeInvalidRequest)
			}
			var body command.ErrorReply
			if err := json.Unmarshal(m.Data, &body); err != nil || body.Code != events.CodeInvalidRequest {
				t.Errorf("reply body %.300q is not an error reply (%v)", m.Data, err)
			}
			if !strings.Contains(desc, c.want) || !strings.Contains(body.Message, c.want) {
				t.Errorf("reply %q / %.300q does not say %q", desc, body.Message, c.want)
			}
			if evs := logOf(t, bus, "confirm", c.id); len(evs) != 0 {
				t.Errorf("an invalid request wrote %v", types(evs))
			}
		})
	}
	if after := streamMsgs(); after != before {
		t.Fatalf("invalid requests wrote %d messages to the log", after-before)
	}

	// A valid one.
	sent := time.Now()
	m := send(body("good-1", nil))
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("valid request refused: %s %s", code, m.Data)
	}
	var reply command.ConfirmationReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		t.Fatalf("reply %s: %v", m.Data, err)
	}
	if reply.ID != "good-1" || reply.AnswerSubject != "heed.confirm.good-1.answered" ||
		reply.Deadline.Before(sent.Add(119*time.Second)) || reply.Deadline.After(time.Now().Add(121*time.Second)) {
		t.Errorf("reply = %+v; want id good-1, answer subject heed.confirm.good-1.answered and a deadline 120 s out", reply)
	}
	evs := logOf(t, bus, "confirm", "good-1")
	if len(evs) != 1 || events.Type(evs[0].Type()) != events.ConfirmRequested {
		t.Fatalf("log of good-1 = %v; want one requested event", types(evs))
	}
	if r := decode[events.ConfirmRequestedData](t, evs[0]); r.Requester != "agent" || r.Message != "Delete 3 branches?" || r.TimeoutS != 120 {
		t.Errorf("stored request = %+v", r)
	}
	// The router takes it from there like any request.
	waitAsked(t, bus, "good-1")

	// The id is used once, whatever the body.
	for _, b := range [][]byte{body("good-1", nil), body("good-1", func(r *command.RequestConfirmation) { r.Message = "Something else?" })} {
		m := send(b)
		if code := m.Header.Get(micro.ErrorCodeHeader); code != string(events.CodeConflict) || !strings.Contains(string(m.Data), "already exists") {
			t.Errorf("reusing id good-1: code %q, %s; want conflict, already exists", code, m.Data)
		}
	}
	if evs := logOf(t, bus, "confirm", "good-1"); len(ofType(evs, events.ConfirmRequested)) != 1 {
		t.Errorf("log of good-1 = %v; want one requested event", types(evs))
	}

	// Without an id the router makes one.
	m = send(body("", nil))
	if err := json.Unmarshal(m.Data, &reply); err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" || !events.ValidID(reply.ID) {
		t.Fatalf("request without id: %s (%v)", m.Data, err)
	}
	if evs := logOf(t, bus, "confirm", reply.ID); len(evs) != 1 {
		t.Errorf("log of %s = %v", reply.ID, types(evs))
	}
}

// ---- f) end to end with the runner ----

const sha = "0123456789abcdef0123456789abcdef01234567"

// startRun starts skills/release_prod.yaml through the runner's command.
func startRun(t *testing.T, nc *nats.Conn) string {
	t.Helper()
	src, err := os.ReadFile("../../skills/release_prod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var req command.StartRun
	req.Skill.Source, req.Skill.File = string(src), "release_prod.yaml"
	req.Inputs = map[string]any{"commit_sha": sha}
	req.RequestedBy = "user:tester"
	b, _ := json.Marshal(req)
	var m *nats.Msg
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		m, err = nc.Request(command.RunStart, b, 10*time.Second)
		return err
	})
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		t.Fatalf("start: %s %s", code, m.Data)
	}
	var reply command.RunReply
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.RunID == "" {
		t.Fatalf("start reply %s: %v", m.Data, err)
	}
	return reply.RunID
}

// waitRun waits until the run's log has an event of typ.
func waitRun(t *testing.T, bus *events.Bus, runID string, typ events.Type) *events.Event {
	t.Helper()
	var found *events.Event
	eventstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		evs := logOf(t, bus, "run", runID)
		for _, ev := range evs {
			switch events.Type(ev.Type()) {
			case typ:
				found = ev
				return nil
			case events.RunFailed, events.RunCancelled, events.RunCompleted:
				t.Fatalf("run %s ended with %s (%s) while waiting for %s; log: %v", runID, ev.Type(), ev.Data(), typ, types(evs))
			}
		}
		return fmt.Errorf("run %s has no %s; log: %v", runID, typ, types(evs))
	})
	return found
}

func TestAlwaysProceedOnASkillStep(t *testing.T) {
	t.Parallel()
	env := eventstest.Start(t)
	start(t, env, router(confirm.Config{}), learnerSvc, runnerSvc)
	bus, nc := env.Bus(t), env.Conn(t)
	kv := prefsKV(t, bus)
	key := events.PrefID(events.ScopeSkillStep, "release_prod", "confirm_release")

	// Run 1 pauses at the confirmation; the person answers "always proceed".
	run1 := startRun(t, nc)
	paused := decode[events.RunPausedData](t, waitRun(t, bus, run1, events.RunPaused))
	if paused.ConfirmID != runner.ConfirmID(run1, 2, 1) || paused.Step != "confirm_release" {
		t.Fatalf("run 1 paused at %+v", paused)
	}
	waitAsked(t, bus, paused.ConfirmID)
	if _, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "heed/cli", paused.ConfirmID, events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "user:tester", Channel: "terminal", Remember: "skill_step"}); err != nil {
		t.Fatal(err)
	}
	teacher := answerEventID(t, bus, paused.ConfirmID)
	done := decode[events.RunCompletedData](t, waitRun(t, bus, run1, events.RunCompleted))
	if !strings.Contains(done.Summary, "Released 01234567 to production") {
		t.Errorf("run 1 summary = %q", done.Summary)
	}
	if p, _ := waitPref(t, kv, key); p.Choice != "proceed" || p.LearnedFrom != teacher {
		t.Fatalf("preference = %+v", p)
	}

	// Run 2 passes the confirmation from memory: nobody answers it.
	run2 := startRun(t, nc)
	waitRun(t, bus, run2, events.RunCompleted)
	cid2 := runner.ConfirmID(run2, 2, 1)
	_, a := waitAnswer(t, bus, cid2)
	if a.Method != events.MethodMemory || a.Choice != "proceed" || a.By != confirm.Source || a.LearnedFrom != teacher {
		t.Errorf("run 2 confirmation answered %+v; want proceed from memory by %s learned from %s", a, confirm.Source, teacher)
	}
	resumed := decode[events.RunResumedData](t, waitRun(t, bus, run2, events.RunResumed))
	if resumed.Method != events.MethodMemory || resumed.ConfirmID != cid2 {
		t.Errorf("run 2 resumed %+v", resumed)
	}
	if _, ok := scheduled(t, bus, cid2); ok {
		t.Errorf("a remembered answer still scheduled a deadline for %s", cid2)
	}

	// After forgetting, run 3 pauses and waits for a person again.
	_, rev := waitPref(t, kv, key)
	forget(t, bus, key, rev)
	waitForgotten(t, kv, key)
	run3 := startRun(t, nc)
	paused = decode[events.RunPausedData](t, waitRun(t, bus, run3, events.RunPaused))
	waitAsked(t, bus, paused.ConfirmID)
	for _, ev := range logOf(t, bus, "run", run3) {
		if typ := events.Type(ev.Type()); typ == events.RunResumed || typ == events.RunCompleted {
			t.Fatalf("run 3 went on without an answer: %v", types(logOf(t, bus, "run", run3)))
		}
	}
	// Cancel it from the prompt's side: the run ends cancelled.
	if _, err := confirmation.Answer(ctxFor(t, 10*time.Second), bus, "heed/cli", paused.ConfirmID, events.ConfirmAnsweredData{Choice: "cancel", Method: events.MethodUser, By: "user:tester"}); err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if got := ofType(logOf(t, bus, "run", run3), events.RunCancelled); len(got) != 1 {
			return errors.New("run 3 not cancelled yet")
		}
		return nil
	})
}
