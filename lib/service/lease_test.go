package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLeaseOneActiveInstance: a second instance stands by while the first
// holds the lease; a release hands it over at once; an instance that
// stops refreshing loses it after the TTL to the stand-by, and finds out
// (ErrLeaseLost) when it tries again.
func TestLeaseOneActiveInstance(t *testing.T) {
	env := eventstest.Start(t)
	js, err := jetstream.New(env.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	log := eventstest.Logger(t)
	topo := events.DefaultTopology()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = time.Second // the server's shortest message TTL

	a, err := service.AcquireLease(ctx, js, topo, "svc", ttl, log)
	if err != nil {
		t.Fatal(err)
	}
	keepA, stopA := context.WithCancel(ctx)
	keptA := make(chan error, 1)
	go func() { keptA <- a.Keep(keepA) }()

	got := make(chan *service.Lease, 1)
	go func() {
		b, err := service.AcquireLease(ctx, js, topo, "svc", ttl, log)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	// A holds and refreshes it: B stands by for several TTLs.
	select {
	case <-got:
		t.Fatal("a second instance took the lease while the first refreshed it")
	case <-time.After(3 * ttl):
	}
	// B says it stands by to whoever asks; the active holder is A.
	nc := env.Conn(t)
	m, err := nc.Request(service.StandbySubject("svc"), nil, time.Second)
	var standby service.LeaseHolder
	if err != nil || json.Unmarshal(m.Data, &standby) != nil || standby.PID != os.Getpid() || standby.Service != "svc" {
		t.Fatalf("the stand-by's answer: %v %v", m, err)
	}
	if h, ok := service.ReadLease(ctx, js, "svc"); !ok || h.PID != os.Getpid() || h.Since.After(standby.Since) {
		t.Fatalf("the lease's holder: %+v %v; want A, active since before B stood by", h, ok)
	}
	// A clean stop hands it over at once.
	stopA()
	<-keptA
	released := time.Now()
	a.Release(ctx)
	var b *service.Lease
	select {
	case b = <-got:
		t.Logf("stand-by took over %s after the release", time.Since(released).Round(time.Millisecond))
	case <-time.After(ttl):
		t.Fatal("the stand-by did not take over within the TTL of a release")
	}
	// Active now, B no longer answers as a stand-by.
	if _, err := nc.Request(service.StandbySubject("svc"), nil, 200*time.Millisecond); err == nil {
		t.Error("the instance that took over still answers as a stand-by")
	}

	// B stops refreshing (paused, cut off): after the TTL a stand-by C
	// takes over, and B's next refresh says the lease is lost.
	stalled := time.Now()
	c, err := service.AcquireLease(ctx, js, topo, "svc", ttl, log)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(stalled); waited < ttl/2 {
		t.Errorf("took a live lease after %s, before its TTL (%s) passed", waited, ttl)
	}
	if err := b.Keep(ctx); !errors.Is(err, service.ErrLeaseLost) {
		t.Errorf("the stalled instance's refresh: %v, want ErrLeaseLost", err)
	}
	c.Release(ctx)
}

// TestLeaseOfADeadProcessOnThisHost: after a kill -9 and a restart on the
// same host the new instance takes the lease at once (its holder's pid is
// gone), not after the TTL.
func TestLeaseOfADeadProcessOnThisHost(t *testing.T) {
	_, js, ctx := leaseServer(t)
	log := eventstest.Logger(t)
	// A lease that lives a minute, held by a process of this host that
	// has exited.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := service.AcquireLease(ctx, js, events.DefaultTopology(), "bootstrap", time.Minute, log); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, service.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	value, _ := json.Marshal(service.LeaseHolder{Service: "svc", Host: host, PID: gone.Process.Pid, Since: time.Now()})
	if _, err := kv.Create(ctx, "svc", value, jetstream.KeyTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := service.AcquireLease(ctx, js, events.DefaultTopology(), "svc", time.Minute, log)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("took %s to take over a dead process's lease", waited)
	}
	l.Release(ctx)
	// A live holder on this host (this test process) is waited for.
	value, _ = json.Marshal(service.LeaseHolder{Service: "svc2", Host: host, PID: os.Getpid() + 0, Since: time.Now()})
	if _, err := kv.Create(ctx, "svc2", value, jetstream.KeyTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if _, err := service.AcquireLease(short, js, events.DefaultTopology(), "svc2", time.Minute, log); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("took the lease of a live process: %v", err)
	}
}

// TestLeaseRefreshStoredUnseen: a refresh whose reply the holder never
// saw (a timeout) but that the stream stored leaves the lease at a
// revision the holder does not know; its next refresh is refused for the
// wrong last sequence. The lease is still its own: it keeps it.
func TestLeaseRefreshStoredUnseen(t *testing.T) {
	_, js, ctx := leaseServer(t)
	const ttl = 2 * time.Second // refreshes every 400 ms: room on a loaded machine
	a, err := service.AcquireLease(ctx, js, events.DefaultTopology(), "unseen", ttl, eventstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	// The refresh the holder never heard of: its own value, stored.
	kv, err := js.KeyValue(ctx, service.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "unseen")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "unseen", e.Value(), e.Revision()); err != nil {
		t.Fatal(err)
	}
	keep, stop := context.WithTimeout(ctx, 2*ttl)
	defer stop()
	if err := a.Keep(keep); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Keep after an unseen refresh: %v, want it kept until its context ended", err)
	}
	if h, ok := service.ReadLease(ctx, js, "unseen"); !ok || h.PID != os.Getpid() {
		t.Fatalf("the lease's holder: %+v %v", h, ok)
	}
}

// leaseServer starts a server for a lease test: its JetStream and a
// context of 30 s.
func leaseServer(t *testing.T) (*eventstest.Env, jetstream.JetStream, context.Context) {
	t.Helper()
	env := eventstest.Start(t)
	js, err := jetstream.New(env.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return env, js, ctx
}

// TestLeaseFreshness: an instance that has not refreshed its lease for
// most of the TTL (it was paused: what it received meanwhile is waiting in
// its socket) is not fresh, before its keeper has noticed anything; a
// refresh makes it fresh again. A stand-by may have taken over by then:
// its commands must not run (a paused runner, resumed, wrote the starts
// its callers had been told failed).
func TestLeaseFreshness(t *testing.T) {
	_, js, ctx := leaseServer(t)
	const ttl = time.Second
	l, err := service.AcquireLease(ctx, js, events.DefaultTopology(), "fresh", ttl, eventstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !l.Fresh() {
		t.Fatal("a lease just taken is not fresh")
	}
	time.Sleep(ttl * 4 / 5) // no keeper: as if paused
	if l.Fresh() {
		t.Fatal("a lease not refreshed for four fifths of its TTL is still fresh")
	}
	var none *service.Lease
	if !none.Fresh() {
		t.Fatal("no lease (a service without one) is not fresh")
	}
}

// TestLeaseReleaseWakesTheStandby: a clean stop's release wakes the
// stand-by at once (it watches the lease), not at its next look a fifth
// of the TTL later (3 s with the default TTL: the stand-by took over 1.6
// to 2.6 s after the drain).
func TestLeaseReleaseWakesTheStandby(t *testing.T) {
	_, js, ctx := leaseServer(t)
	const ttl = 10 * time.Second // a look every 2 s
	log := eventstest.Logger(t)
	a, err := service.AcquireLease(ctx, js, events.DefaultTopology(), "wake", ttl, log)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *service.Lease, 1)
	go func() {
		b, err := service.AcquireLease(ctx, js, events.DefaultTopology(), "wake", ttl, log)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	time.Sleep(500 * time.Millisecond) // B stands by, watching
	released := time.Now()
	a.Release(ctx)
	select {
	case b := <-got:
		t.Logf("stand-by took over %s after the release", time.Since(released).Round(time.Millisecond))
		b.Release(ctx)
	case <-time.After(time.Second):
		t.Fatal("the stand-by did not take over within a second of the release")
	}
}
