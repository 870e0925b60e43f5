package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const cmdPathSkill = `name: cmdpath
description: one confirmation
steps:
  - name: approve
    confirm:
      message: "Go ahead?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: 300
    output: decision
summary: "chose {{ decision }}"
`

// TestCommandsLeaveNoConsumers runs heed up's services in this process
// against a real server and sends 1,000 commands and reads through the
// client package (run starts, status reads, continues, answers, cancels,
// waits for the end and for the answer, index, history and confirmation
// reads): no JetStream
// consumer is created while they run (no consumer-created advisory) and
// every stream has as many consumers after as before. Reading a run's
// history, continuing it or answering it leaves nothing on the server.
func TestCommandsLeaveNoConsumers(t *testing.T) {
	env := eventstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	upCtx, stopUp := context.WithCancel(ctx)
	var out syncBuffer
	upDone := make(chan error, 1)
	go func() {
		upDone <- runUp(upCtx, eventstest.Logger(t), upOptions{natsURL: env.URL(), sweepEvery: -1}, &out)
	}()
	defer func() {
		stopUp()
		if err := <-upDone; err != nil {
			t.Errorf("heed up: %v", err)
		}
	}()
	eventstest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		if !strings.Contains(out.String(), "heed: ready") {
			return fmt.Errorf("heed up not ready: %q", out.String())
		}
		return nil
	})

	c, err := heedclient.Connect(ctx, env.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	js := c.JetStream()
	consumers := func() map[string]int {
		t.Helper()
		n := map[string]int{}
		for info := range js.ListStreams(ctx).Info() {
			n[info.Config.Name] = info.State.Consumers
		}
		return n
	}

	// Every consumer created on the server, in order of the advisories.
	var mu sync.Mutex
	var created []string
	adv := env.Conn(t)
	sub, err := adv.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.>", func(m *nats.Msg) {
		mu.Lock()
		created = append(created, strings.TrimPrefix(m.Subject, "$JS.EVENT.ADVISORY.CONSUMER.CREATED."))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := adv.Flush(); err != nil {
		t.Fatal(err)
	}
	// settle returns the consumers created since the last settle. The
	// server sends advisories in order: once the advisory of a consumer
	// created now has come, every earlier one has.
	settle := func() []string {
		t.Helper()
		cons, err := js.OrderedConsumer(ctx, events.EventStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"heed.run.none.>"}})
		if err != nil {
			t.Fatal(err)
		}
		marker := events.EventStream + "." + cons.CachedInfo().Name
		var others []string
		eventstest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			for i, name := range created {
				if name == marker {
					others = append(others, created[:i]...)
					created = created[i+1:]
					return nil
				}
			}
			return fmt.Errorf("no advisory for the marker consumer %s yet", marker)
		})
		if err := js.DeleteConsumer(ctx, events.EventStream, cons.CachedInfo().Name); err != nil {
			t.Fatal(err)
		}
		return others
	}

	// One flow first, outside the count: whatever a service sets up on
	// first use is set up.
	var commands atomic.Int64
	flow := func(i int) error {
		do := func(err error) error { commands.Add(1); return err }
		rep, err := c.StartRun(ctx, command.StartRun{Skill: command.SkillSource{File: "cmdpath.yaml", Source: cmdPathSkill}, RequestedBy: "test", Agent: "test-agent"})
		if err := do(err); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		var r *runstate.Run
		for {
			r, err = c.Run(ctx, rep.RunID)
			if err := do(err); err != nil {
				return fmt.Errorf("status: %w", err)
			}
			if r.Status == runstate.StatusPaused && r.Paused != nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(2 * time.Millisecond) // the run is on its way to its pause
		}
		switch i % 3 {
		case 0:
			_, err = c.Continue(ctx, command.ContinueRun{RunID: rep.RunID, Choice: "proceed", By: "test-agent"})
		case 1:
			_, err = c.Answer(ctx, command.AnswerConfirmation{ID: r.Paused.ConfirmID, Choice: "proceed", By: "alice", Channel: "test"})
		default:
			_, err = c.Cancel(ctx, command.CancelRun{RunID: rep.RunID, By: "test"})
		}
		if err := do(err); err != nil {
			return fmt.Errorf("continue, answer or cancel: %w", err)
		}
		out, err := c.WaitRun(ctx, rep.RunID)
		if err := do(err); err != nil {
			return fmt.Errorf("wait: %w", err)
		}
		if want := map[int]string{0: "completed", 1: "completed", 2: "cancelled"}[i%3]; out.Status != want {
			return fmt.Errorf("run %s ended %s, want %s", rep.RunID, out.Status, want)
		}
		_, _, err = c.IndexEntry(ctx, "run", rep.RunID)
		if err := do(err); err != nil {
			return fmt.Errorf("index entry: %w", err)
		}
		_, err = c.History(ctx, events.SubjectFilter("run", rep.RunID))
		if err := do(err); err != nil {
			return fmt.Errorf("history: %w", err)
		}
		if i%3 != 2 { // a cancelled run's question stays open until its deadline
			_, err = c.WaitAnswer(ctx, r.Paused.ConfirmID)
			if err := do(err); err != nil {
				return fmt.Errorf("wait for the answer: %w", err)
			}
		}
		_, err = c.Confirmation(ctx, r.Paused.ConfirmID)
		if err := do(err); err != nil {
			return fmt.Errorf("confirmation: %w", err)
		}
		return nil
	}
	if err := flow(0); err != nil {
		t.Fatal(err)
	}
	// The services have caught up with the first flow: their consumers
	// are all there (each service's durables exist before it is ready).
	settle()
	before := consumers()
	commands.Store(0)

	began := time.Now()
	const workers = 10
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for commands.Load() < 1000 {
				if err := flow(int(next.Add(1))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(began)
	t.Logf("%d commands and reads in %v (%.0f/s)", commands.Load(), took.Round(time.Millisecond), float64(commands.Load())/took.Seconds())

	if others := settle(); len(others) > 0 {
		t.Errorf("%d consumers created during the commands: %v", len(others), others)
	}
	after := consumers()
	for name, n := range before {
		if after[name] != n {
			t.Errorf("stream %s: %d consumers after the commands, %d before", name, after[name], n)
		}
	}
}
