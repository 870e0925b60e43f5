package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/tool"
	"github.com/nats-io/nats.go"
)

// TestNATSTool: a tool served with tool.Serve answers the runner's calls by
// request/reply, with its output, its chosen error kind, or a timeout; a
// tool nobody serves is unavailable at once.
func TestNATSTool(t *testing.T) {
	env := eventstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	server := env.Conn(t)
	got := make(chan tool.Request, 10)
	svc, err := tool.Serve(ctx, server, "calc", "test calculator", func(ctx context.Context, req tool.Request) (any, error) {
		got <- req
		switch req.Args["op"] {
		case "double":
			n, _ := req.Args["n"].(float64)
			return map[string]any{"result": n * 2}, nil
		case "quota":
			return nil, &tool.Error{Kind: "quota", Message: "over quota for " + req.RunID}
		case "plain":
			return nil, errors.New("plain failure")
		case "slow":
			time.Sleep(2 * time.Second)
			return "late", nil
		}
		return nil, fmt.Errorf("unknown op %v", req.Args["op"])
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	// The server has the tool's subscription before anyone calls it
	// (callers use other connections).
	if err := server.Flush(); err != nil {
		t.Fatal(err)
	}

	reg, err := tool.Load("tools.yaml", []byte(`
tools:
  calc: {kind: nats, timeout: 500ms}
  ghost: {kind: nats}
  raw: {kind: nats, subject: test.raw.tool}
`))
	if err != nil {
		t.Fatal(err)
	}
	inv := &tool.Invoker{Registry: reg, Requester: env.Conn(t)}
	call := func(name string, args map[string]any) tool.Result {
		return inv.Invoke(ctx, tool.Call{Tool: name, Args: args, RunID: "run7", Step: "calc", Attempt: 1, IdempotencyKey: tool.IdempotencyKey("run7", 3, 1)})
	}

	res := call("calc", map[string]any{"op": "double", "n": 21})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if want := map[string]any{"result": json.Number("42")}; !reflect.DeepEqual(res.Output, want) {
		t.Errorf("output %#v, want %#v", res.Output, want)
	}
	select {
	case req := <-got:
		want := tool.Request{Tool: "calc", Args: map[string]any{"op": "double", "n": float64(21)}, RunID: "run7", Step: "calc", Attempt: 1, IdempotencyKey: "run7/3/1"}
		if !reflect.DeepEqual(req, want) {
			t.Errorf("the tool received %+v, want %+v", req, want)
		}
	default:
		t.Error("the handler was not called")
	}

	res = call("calc", map[string]any{"op": "quota"})
	if res.Err == nil || res.Err.Kind != "quota" || res.Err.Message != "over quota for run7" {
		t.Errorf("quota: %+v", res.Err)
	}
	res = call("calc", map[string]any{"op": "plain"})
	if res.Err == nil || res.Err.Kind != "tool" || res.Err.Message != "plain failure" {
		t.Errorf("plain error: %+v", res.Err)
	}

	start := time.Now()
	res = call("calc", map[string]any{"op": "slow"})
	if res.Err == nil || res.Err.Kind != "timeout" || !strings.Contains(res.Err.Message, "timed out after 500ms") {
		t.Errorf("slow: %+v", res.Err)
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("a 500ms timeout took %s", took)
	}

	start = time.Now()
	res = call("ghost", nil)
	if res.Err == nil || res.Err.Kind != "unavailable" || !strings.Contains(res.Err.Message, "nobody serves heed.tool.ghost") {
		t.Errorf("ghost: %+v", res.Err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("no responders took %s to notice", took)
	}

	// Any process may serve a tool on its subject; the idempotency key also
	// travels as a header.
	hdr := make(chan string, 1)
	sub, err := server.Subscribe("test.raw.tool", func(m *nats.Msg) {
		hdr <- m.Header.Get(tool.HeaderIdempotencyKey)
		_ = m.Respond([]byte("plain answer\n"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := server.Flush(); err != nil {
		t.Fatal(err)
	}
	res = call("raw", map[string]any{})
	if res.Err != nil || res.Output != "plain answer" {
		t.Errorf("raw: %+v %#v", res.Err, res.Output)
	}
	select {
	case h := <-hdr:
		if h != "run7/3/1" {
			t.Errorf("header %s = %q", tool.HeaderIdempotencyKey, h)
		}
	case <-time.After(5 * time.Second):
		t.Error("the raw tool was never called")
	}

	// Without a connection nats tools are unavailable, not a crash.
	res = (&tool.Invoker{Registry: reg}).Invoke(ctx, tool.Call{Tool: "calc"})
	if res.Err == nil || res.Err.Kind != "unavailable" {
		t.Errorf("no connection: %+v", res.Err)
	}
}

// TestNATSToolBadRequest: a message that is not a tool call gets a
// bad_request error, not a crash.
func TestNATSToolBadRequest(t *testing.T) {
	env := eventstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server := env.Conn(t)
	svc, err := tool.Serve(ctx, server, "echo", "echo", func(ctx context.Context, req tool.Request) (any, error) { return req.Args, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	// The server has the tool's subscription before the request below,
	// which comes on another connection.
	if err := server.Flush(); err != nil {
		t.Fatal(err)
	}
	m, err := env.Conn(t).RequestWithContext(ctx, "heed.tool.echo", []byte("not json"))
	if err != nil {
		t.Fatal(err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "bad_request" {
		t.Errorf("error code %q, headers %v", code, m.Header)
	}
}
