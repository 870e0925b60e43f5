package events_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/embedded"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A service that binds its bucket while JetStream cannot answer (its
// server restarting, a leader being elected) waits for it instead of
// failing, and gets the bucket once the server is back.
func TestBindBucketWaitsForJetStream(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.Start(embedded.Config{DataDir: dir, Listen: "127.0.0.1:-1", ServerName: "bind", Logger: eventstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(first.URL())
	nc, err := nats.Connect(first.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := events.ProvisionBucket(ctx, js, events.DefaultTopology(), events.BucketSpec{Name: "bind_state", Description: "test"}); err != nil {
		t.Fatal(err)
	}
	first.Stop()

	type bound struct {
		kv  jetstream.KeyValue
		err error
	}
	done := make(chan bound, 1)
	go func() {
		kv, err := events.BindBucket(ctx, js, "bind_state")
		done <- bound{kv, err}
	}()
	select {
	case b := <-done:
		t.Fatalf("bound with the server down: %v, %v", b.kv, b.err)
	case <-time.After(time.Second):
	}
	second, err := embedded.Start(embedded.Config{DataDir: dir, Listen: u.Host, ServerName: "bind", Logger: eventstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
	select {
	case b := <-done:
		if b.err != nil {
			t.Fatalf("BindBucket after the server came back: %v", b.err)
		}
		if b.kv.Bucket() != "bind_state" {
			t.Fatalf("bound %q", b.kv.Bucket())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("BindBucket still waiting 30 s after the server came back")
	}
	// A bucket created while the bind looks for it (in a cluster: one
	// another service has just created, not yet visible to every server)
	// is bound.
	created := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		created <- events.ProvisionBucket(ctx, js, events.DefaultTopology(), events.BucketSpec{Name: "bind_late", Description: "test"})
	}()
	if kv, err := events.BindBucket(ctx, js, "bind_late"); err != nil || kv.Bucket() != "bind_late" {
		t.Fatalf("BindBucket of a bucket created 0.5 s later: %v", err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	// A bucket that does not exist is an answer after a short grace, not
	// a wait.
	start := time.Now()
	if _, err := events.BindBucket(ctx, js, "no_such_bucket"); err == nil {
		t.Fatal("bound a bucket that does not exist")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a missing bucket took %s to be refused", d)
	}
}
