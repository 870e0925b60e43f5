// Package client is how Go programs use heed: the CLI, the terminal
// prompt, the console, the desktop and chat bridges, the MCP server and
// any Go agent. It speaks only heed's contract over NATS (commands on
// heed.cmd.>, events in HEED_EVENTS, the read-model buckets), exactly as a
// client in any other language would, so it works against `heed up` on a
// laptop or a NATS cluster alike.
//
//	c, err := client.Connect(ctx, "nats://127.0.0.1:4222", client.Name("my-bot"))
//	run, err := c.StartRun(ctx, command.StartRun{Skill: command.SkillSource{Source: yaml}})
//	out, err := c.WaitRun(ctx, run.RunID)
package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/skill"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// URL is the NATS URL a client uses: url if set, else $HEED_NATS_URL,
// else nats://127.0.0.1:4222 (where heed up listens).
func URL(url string) string { return events.NATSURL(url) }

// Client is a connection to heed. It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	owned   bool
	bus     *events.Bus
	source  string
	timeout time.Duration
	skills  *skill.Cache // skills of the runs read, compiled once

	presMu  sync.Mutex
	present map[string]*presence // identity → its presence (Present)

	denied *denials // calls to fail when the server refuses their subject

	agent string // Agent: the run commands go on this agent's own path
}

// Option configures a Client.
type Option interface{ apply(*options) }

type options struct {
	agent    string
	name     string
	source   string
	timeout  time.Duration
	natsOpts []nats.Option
}

// Name names the NATS connection (shown by `nats server report connections`).
type Name string

func (n Name) apply(o *options) { o.name = string(n) }

// Source is the CloudEvents source of the events this client writes
// (preferences and fixes forgotten or taught by a person). Default
// "heed/client".
type Source string

func (s Source) apply(o *options) { o.source = string(s) }

// Timeout bounds every command call that has no earlier deadline.
// Default 20s.
type Timeout time.Duration

func (t Timeout) apply(o *options) { o.timeout = time.Duration(t) }

// Agent makes the client act as the named agent on a deployment that keeps
// agents to their own runs (heed deploy permissions --isolate-agents): the
// run commands go on the agent's own path (heed.cmd.as.<agent>.run.*),
// runs are followed with heed.cmd.run.get instead of reading the log, and
// replies come to the agent's own inboxes (_INBOX.<agent>.>). Reads of the
// log and the read models are not the agent's to make there.
type Agent string

func (a Agent) apply(o *options) { o.agent = string(a) }

// NATSOptions are passed to nats.Connect (credentials, TLS).
type NATSOptions []nats.Option

func (n NATSOptions) apply(o *options) { o.natsOpts = append(o.natsOpts, n...) }

func resolve(opts []Option) options {
	o := options{name: "heed-client", source: "heed/client", timeout: 20 * time.Second}
	for _, opt := range opts {
		opt.apply(&o)
	}
	return o
}

// Connect dials NATS at url (see URL) and checks that heed's event stream
// is there.
func Connect(ctx context.Context, url string, opts ...Option) (*Client, error) {
	o := resolve(opts)
	url = URL(url)
	d := &denials{}
	// Last, so that it wraps the caller's error handler, if any.
	watchDenials := func(no *nats.Options) error {
		no.AsyncErrorCB = d.errorHandler(no.AsyncErrorCB)
		return nil
	}
	if o.agent != "" && !events.ValidID(o.agent) {
		return nil, events.Errorf(events.CodeInvalidRequest, "agent %q: an agent's name is one subject token (letters, digits, - and _)", o.agent)
	}
	natsOpts := append([]nats.Option{nats.Name(o.name), nats.Timeout(3 * time.Second)}, o.natsOpts...)
	if o.agent != "" {
		natsOpts = append(natsOpts, nats.CustomInboxPrefix(command.AgentInboxPrefix(o.agent)))
	}
	nc, err := nats.Connect(url, append(natsOpts, watchDenials)...)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("cannot reach NATS at %s (is `heed up` running? set --nats-url or HEED_NATS_URL): %v", url, err), Err: err}
	}
	c, err := newClient(nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.owned = true
	c.denied = d
	if o.agent != "" {
		return c, nil // the log is not the agent's to read: nothing to check there
	}
	// A JetStream API with another prefix is not watched: the check then
	// times out as before.
	sctx, stop := d.watch(ctx, "$JS.API.STREAM.INFO."+events.EventStream)
	// While a cluster elects the stream's leader (a node was killed) the
	// lookup times out for a few seconds: asked again within 10 s, as the
	// services do for longer, before the command gives up.
	wctx, cancel := context.WithTimeout(sctx, 10*time.Second)
	err = events.WhileUnavailable(wctx, func() error {
		actx, acancel := context.WithTimeout(wctx, 3*time.Second)
		defer acancel()
		_, err := c.bus.JetStream().Stream(actx, events.EventStream)
		return err
	})
	cancel()
	stop()
	if denied := deniedCause(sctx); err != nil && denied != nil {
		nc.Close()
		return nil, &events.Error{Code: events.CodeForbidden, Message: "this identity may not read heed's log (the NATS server refused $JS.API.STREAM.INFO." + events.EventStream + "); an agent kept to its own runs connects as that agent: --as-agent NAME, $HEED_AGENT (client.Agent)", Err: denied}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		nc.Close()
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("no heed event stream on %s (start heed with `heed up`, or its services against this NATS): %v", url, err), Err: err}
	}
	if err != nil {
		nc.Close()
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("heed's event stream on %s does not answer (a cluster electing its leader, or without quorum: try again): %v", url, err), Err: err}
	}
	return c, nil
}

// New returns a client over an existing connection, which stays the
// caller's to close.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	return newClient(nc, resolve(opts))
}

func newClient(nc *nats.Conn, o options) (*Client, error) {
	v, err := events.NewValidator()
	if err != nil {
		return nil, err
	}
	bus, err := events.NewBus(nc, events.NewCodec(v))
	if err != nil {
		return nil, err
	}
	return &Client{skills: skill.NewCache(), nc: nc, bus: bus, source: o.source, timeout: o.timeout, agent: o.agent}, nil
}

// Close drains the connection if the client dialled it.
func (c *Client) Close() {
	if c.owned {
		_ = c.nc.Drain()
	}
}

// Conn is the client's NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Bus is the client's validating event bus (read the log, publish events).
func (c *Client) Bus() *events.Bus { return c.bus }

// JetStream is the client's JetStream context.
func (c *Client) JetStream() jetstream.JetStream { return c.bus.JetStream() }

// Publish validates ev and writes it to the log; its source is the
// client's unless set.
func (c *Client) Publish(ctx context.Context, ev *events.Event) error {
	if ev.Source() == "" {
		ev.SetSource(c.source)
	}
	_, err := c.bus.Publish(ctx, ev)
	return err
}

// SourceName is the CloudEvents source of the events this client writes.
func (c *Client) SourceName() string { return c.source }
