package command_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// TestRequestsWithoutReply: commands published with no reply subject,
// succeeding and failing, many at once (run with -race): a success sends
// nothing (a Respond would fail and record its error on the request while
// micro reads it: a data race), a failure is dead-lettered once, and the
// endpoint goes on answering requests that have a reply.
func TestRequestsWithoutReply(t *testing.T) {
	ctx := t.Context()
	bus, nc, handled := serveRunGet(t, func(req *command.GetRun) (any, error) {
		if req.RunID == "missing" {
			return nil, events.Errorf(events.CodeNotFound, "no run %q", req.RunID)
		}
		return command.RunEvents{RunID: req.RunID, Status: "running", Events: []command.StoredRaw{}}, nil
	})
	const n = 200
	for i := range n {
		id := "r1"
		if i%2 == 1 {
			id = "missing"
		}
		if err := nc.Publish(command.RunGet, []byte(`{"run_id":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := nc.Request(command.RunGet, []byte(`{"run_id":"r1"}`), 5*time.Second)
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("a request with a reply: %v %v", err, m)
	}
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if handled.Load() < n+1 {
			return fmt.Errorf("%d of %d requests handled", handled.Load(), n+1)
		}
		s, err := bus.JetStream().Stream(ctx, events.DLQStream)
		if err != nil {
			return err
		}
		if got := s.CachedInfo().State.Msgs; got != n/2 {
			return fmt.Errorf("%d dead letters, want %d", got, n/2)
		}
		return nil
	})
}

// TestJetStreamDeliveriesAreNotCommands: a push consumer whose deliver
// subject is a command subject (nats-server checks it against nobody's
// permissions, and delivers as the account) does not get stored messages
// served as commands: each is terminated, not handled, not dead-lettered,
// and neither are its heartbeats, a direct get's answer sent to a command
// subject, or a request whose reply subject is an API's; requests still
// are.
func TestJetStreamDeliveriesAreNotCommands(t *testing.T) {
	ctx := t.Context()
	bus, nc, handled := serveRunGet(t, func(req *command.GetRun) (any, error) {
		return command.RunEvents{RunID: req.RunID, Status: "running", Events: []command.StoredRaw{}}, nil
	})
	js := bus.JetStream()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "STORED", Subjects: []string{"stored.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for range n {
		// Valid commands, as a failed command's dead letter holds them.
		if _, err := js.Publish(ctx, "stored.x", []byte(`{"run_id":"r1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateOrUpdatePushConsumer(ctx, jetstream.ConsumerConfig{Durable: "replayer", DeliverSubject: command.RunGet, DeliverGroup: "q", // micro's queue group
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 3, IdleHeartbeat: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		c, err := s.PushConsumer(ctx, "replayer")
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.Delivered.Stream != n || info.NumAckPending != 0 || info.NumRedelivered != 0 {
			return fmt.Errorf("delivered %d of %d, %d waiting for an ack, %d redelivered", info.Delivered.Stream, n, info.NumAckPending, info.NumRedelivered)
		}
		return nil
	})
	// A direct get's answer, sent as the account to the reply subject the
	// getter chose: a stored message, not a request.
	if err := nc.PublishRequest("$JS.API.DIRECT.GET.STORED", command.RunGet, []byte(`{"seq":1}`)); err != nil {
		t.Fatal(err)
	}
	// A request asking for its reply in an API namespace: the reply would
	// act with the service's rights.
	if err := nc.PublishRequest(command.RunGet, "$JS.API.STREAM.INFO.STORED", []byte(`{"run_id":"r1"}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // heartbeats come meanwhile
	if got := handled.Load(); got != 0 {
		t.Errorf("%d deliveries handled as commands", got)
	}
	if d, err := js.Stream(ctx, events.DLQStream); err != nil {
		t.Fatal(err)
	} else if got := d.CachedInfo().State.Msgs; got != 0 {
		t.Errorf("%d dead letters of deliveries or heartbeats", got)
	}
	m, err := nc.Request(command.RunGet, []byte(`{"run_id":"r1"}`), 5*time.Second)
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" || handled.Load() != 1 {
		t.Fatalf("a request: %v %v, handled %d", err, m, handled.Load())
	}
}

// serveRunGet starts a server and serves heed.cmd.run.get with f on it
// (dead letters on) until the test ends, counting the requests handled.
func serveRunGet(t *testing.T, f func(req *command.GetRun) (any, error)) (bus *events.Bus, nc *nats.Conn, handled *atomic.Int64) {
	t.Helper()
	env := eventstest.Start(t)
	bus, nc, handled = env.Bus(t), env.Conn(t), new(atomic.Int64)
	h := command.Handler(t.Context(), bus.Codec().Validator(), command.RunGet, 5*time.Second, func(_ context.Context, req *command.GetRun) (any, error) {
		handled.Add(1)
		return f(req)
	}, command.All{command.DeadLetters{Bus: bus, Service: "test-commands", Log: eventstest.Logger(t)}})
	svc, err := micro.AddService(nc, micro.Config{Name: "test-commands", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if err := svc.AddEndpoint("get", h, micro.WithEndpointSubject(command.RunGet)); err != nil {
		t.Fatal(err)
	}
	return bus, nc, handled
}
