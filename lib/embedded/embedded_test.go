package embedded_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSystemAccountKeepsExistingData starts a server on a data directory
// written before heed had a system account, then again with one: the
// stream and its message are still there for clients without credentials
// (the global account owns them), and the system user gets JetStream
// reports from $SYS.
func TestSystemAccountKeepsExistingData(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	old, err := embedded.Start(embedded.Config{DataDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(old.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OLD", Subjects: []string{"old.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "old.one", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	old.Stop()

	const pass = "s3cret-for-the-test"
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Listen: "127.0.0.1:-1", SystemPassword: pass})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if srv.SystemAccount() == nil || srv.SystemAccount().Name != "SYS" {
		t.Fatalf("system account %v, want SYS", srv.SystemAccount())
	}
	plain, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatalf("a client without credentials: %v", err)
	}
	defer plain.Close()
	js, _ = jetstream.New(plain)
	s, err := js.Stream(ctx, "OLD")
	if err != nil {
		t.Fatalf("the stream written before: %v", err)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil || string(m.Data) != "kept" {
		t.Fatalf("its message: %v %v", m, err)
	}
	if _, err := nats.Connect(srv.URL(), nats.UserInfo(embedded.SystemUser, "wrong")); err == nil {
		t.Fatal("the system user with a wrong password was let in")
	}
	sys, err := nats.Connect(srv.URL(), nats.UserInfo(embedded.SystemUser, pass))
	if err != nil {
		t.Fatalf("the system user: %v", err)
	}
	defer sys.Close()
	reply, err := sys.Request("$SYS.REQ.SERVER.PING.JSZ", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("JSZ: %v", err)
	}
	var jsz struct {
		Data struct {
			Streams int `json:"streams"`
		} `json:"data"`
	}
	if err := json.Unmarshal(reply.Data, &jsz); err != nil || jsz.Data.Streams != 1 {
		t.Fatalf("JSZ sees %d streams (%v): %s", jsz.Data.Streams, err, reply.Data)
	}
}
