package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
)

// Func is a typed command handler.
type Func[Req any] func(ctx context.Context, req *Req) (any, error)

// MaxConcurrent bounds the requests one command handles at once; past it
// a request is answered at once with code busy (try again), so a slow
// caller cannot make every other wait.
const MaxConcurrent = 256

// Handler turns f into a micro handler for the command on subject: the
// request is checked against the command's schema and decoded into Req
// (unknown fields refused), f's reply is sent as JSON, and an error as a
// micro error reply with heed's code and an ErrorReply body. Each request
// gets timeout to finish, within ctx (the service's: a draining service
// cancels what it has in hand). Requests are handled concurrently, up to
// MaxConcurrent; past that a request is answered at once with code busy.
func Handler[Req any](ctx context.Context, v *events.Validator, subject string, timeout time.Duration, f Func[Req], opts ...Option) micro.Handler {
	return serve(ctx, subject, timeout, opts, func(ctx context.Context, r micro.Request) (any, error) {
		return handle(ctx, v, subject, r.Data(), f)
	})
}

// AgentFunc is a typed handler of a command on an agent's own path: agent
// is the path's agent (see AgentPrefix).
type AgentFunc[Req any] func(ctx context.Context, agent string, req *Req) (any, error)

// AgentHandler is Handler for the command subject on every agent's path
// (heed.cmd.as.*.<command>): the request is checked against subject's
// schema, and f gets the agent the request came on.
func AgentHandler[Req any](ctx context.Context, v *events.Validator, subject string, timeout time.Duration, f AgentFunc[Req], opts ...Option) micro.Handler {
	return serve(ctx, subject, timeout, opts, func(ctx context.Context, r micro.Request) (any, error) {
		agent, base, ok := AgentOf(r.Subject())
		if !ok || base != subject {
			return nil, events.Errorf(events.CodeInvalidRequest, "%s is not %s on an agent's path (%s.<agent>%s; an agent is one subject token)", r.Subject(), subject, AgentPrefix, strings.TrimPrefix(subject, events.CommandPrefix))
		}
		return handle(ctx, v, subject, r.Data(), func(ctx context.Context, req *Req) (any, error) { return f(ctx, agent, req) })
	})
}

// Option adjusts how a command is served.
type Option interface{ apply(*serveOptions) }

type serveOptions struct {
	dead  *DeadLetters
	gates []func() error
	// busyDead bounds the dead letters of busy refusals being written.
	busyDead chan struct{}
	// refused counts the messages that are not requests (notARequest).
	refused events.Tally
}

func (o *serveOptions) log() *slog.Logger {
	if o.dead != nil && o.dead.Log != nil {
		return o.dead.Log
	}
	return slog.Default()
}

// Gate is checked before each request is handled: an error refuses the
// request with it (the service's Runtime.Current: an instance whose lease
// may have passed to another does not act on what it received while it
// was paused).
type Gate func() error

func (g Gate) apply(o *serveOptions) {
	if g != nil {
		o.gates = append(o.gates, g)
	}
}

// All is several options as one.
type All []Option

func (a All) apply(o *serveOptions) {
	for _, opt := range a {
		opt.apply(o)
	}
}

// DeadLetters sends a request that fails and has no reply subject to
// HEED_DLQ (heed.dlq.cmd.<command>) with its code and reason, counted
// under Service in heed_dead_letters_total. Such a request was published
// rather than requested (`nats pub heed.cmd.run.start …`): its error has
// nowhere else to go, and principle 3 says nothing is dropped silently.
// A request with a reply subject gets its error in the reply, as before.
type DeadLetters struct {
	Bus     *events.Bus
	Service string       // the consumer the dead letter names, e.g. heed-runner-commands
	Log     *slog.Logger // nil: slog.Default()
}

func (d DeadLetters) apply(o *serveOptions) { o.dead = &d }

// unanswered dead-letters the failed request r, which has no reply
// subject, if the command was served with DeadLetters.
func (o *serveOptions) unanswered(ctx context.Context, r micro.Request, err error) {
	if o.dead == nil || o.dead.Bus == nil {
		return
	}
	log := o.dead.Log
	if log == nil {
		log = slog.Default()
	}
	h := nats.Header(r.Headers())
	dl := events.DeadLetter{
		Subject: r.Subject(), Header: h, Data: r.Data(), Consumer: o.dead.Service,
		Code: commandCode(events.CodeOf(err)), Reason: events.Message(err) + " (sent without a reply subject, so this dead letter is the only answer)",
		ID: "dlq:cmd:" + nuid.Next(),
	}
	// The service's ctx, not the request's: the request may have run out
	// of time, and the dead letter must still be written.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if werr := o.dead.Bus.DeadLetter(wctx, dl); werr != nil {
		log.Error("a command sent without a reply subject failed, and its dead letter could not be written", "subject", dl.Subject, "code", dl.Code, "reason", events.Message(err), "err", werr)
		return
	}
	log.Warn("dead-lettered a command sent without a reply subject", "subject", dl.Subject, "code", dl.Code, "reason", events.Message(err))
}

// jetStreamDelivery tells a message a JetStream consumer delivered (its
// reply subject is the ack subject, $JS.ACK.<stream>.<consumer>.… or,
// with a domain, $JS.ACK.<domain>.<account>.<stream>.<consumer>.…) from a
// request.
func jetStreamDelivery(reply string) (stream, consumer string, ok bool) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return "", "", false
	}
	tokens := strings.Split(rest, ".")
	switch {
	case len(tokens) >= 9: // the v2 form: domain, account hash, stream, consumer, …
		return tokens[2], tokens[3], true
	case len(tokens) >= 2:
		return tokens[0], tokens[1], true
	}
	return "", "", true
}

// notARequest tells what is not a client's request though it arrived on
// a command subject, and why. nats-server sends some messages as the
// account itself, whatever the sender's permissions, to a subject the
// sender chose: a push consumer's deliveries to its deliver subject, a
// direct get's answer (a stored message, with Nats-Stream and
// Nats-Sequence headers) to the reply subject of the get. Any role that
// may follow the log could otherwise replay stored messages (events,
// bucket values, failed commands' dead letters) as commands it may not
// send. And a request whose reply subject is in an API namespace ($JS.…,
// $KV.…, heed.…) asks this service to publish its reply there, with the
// service's rights: the reply would act.
func notARequest(r micro.Request) (why string, ok bool) {
	if stream, consumer, ok := jetStreamDelivery(r.Reply()); ok {
		return "a JetStream consumer's delivery (stream " + stream + ", consumer " + consumer + ": delete it, nats consumer rm " + stream + " " + consumer + ")", true
	}
	h := nats.Header(r.Headers())
	switch {
	case h.Get("Status") != "":
		return "a server status message (a heartbeat, flow control, a get's 404)", true
	case h.Get("Nats-Stream") != "" || h.Get("Nats-Sequence") != "":
		return "a stored message relayed by a direct get (stream " + h.Get("Nats-Stream") + ")", true
	case strings.HasPrefix(r.Reply(), "$") || strings.HasPrefix(r.Reply(), events.Prefix+"."):
		return "its reply subject " + r.Reply() + " is not an inbox: a reply there would act with this service's rights", true
	}
	return "", false
}

// refuse drops what notARequest found: not handled, not dead-lettered (a
// consumer on the dead letters delivering here would loop), terminated
// if it is a delivery (no redelivery); the log says why, at most once a
// second.
func (o *serveOptions) refuse(r micro.Request, why string) {
	if _, _, ok := jetStreamDelivery(r.Reply()); ok {
		_ = r.Respond([]byte("+TERM"))
	}
	n, log := o.refused.Add()
	if !log {
		return
	}
	o.log().Warn("refused messages on a command subject that are not a client's request", "subject", r.Subject(), "why", why, "refused", n)
}

// maxReplyBytes is the largest reply sent: NATS' default message size
// (1 MiB) less room for its headers.
const maxReplyBytes = 1<<20 - 8<<10

// serve runs h for each request, concurrently up to MaxConcurrent, each
// within timeout, and sends its reply or error reply (or, for a request
// with no reply subject, a dead letter: see DeadLetters).
func serve(ctx context.Context, subject string, timeout time.Duration, opts []Option, h func(ctx context.Context, r micro.Request) (any, error)) micro.Handler {
	var o serveOptions
	for _, opt := range opts {
		opt.apply(&o)
	}
	o.busyDead = make(chan struct{}, 4)
	slots := make(chan struct{}, MaxConcurrent)
	return micro.HandlerFunc(func(r micro.Request) {
		if why, ok := notARequest(r); ok {
			o.refuse(r, why)
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			busy := events.Errorf(events.CodeBusy, "%s has %d requests in hand; try again", subject, MaxConcurrent)
			if r.Reply() == "" {
				// Written by one goroutine at a time, beside the endpoint
				// (which must not wait for a slow stream: requests with a
				// reply would time out behind it); past a few waiting, the
				// busy refusals are counted in the log only (a flood).
				select {
				case o.busyDead <- struct{}{}:
					go func() {
						defer func() { <-o.busyDead }()
						o.unanswered(ctx, r, busy)
					}()
				default:
					o.log().Warn("a command sent without a reply subject was refused as busy, and too many such are being dead-lettered already", "subject", subject)
				}
				return
			}
			RespondError(r, busy)
			return
		}
		go func() {
			defer func() { <-slots }()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			var out any
			var err error
			for _, g := range o.gates {
				if err = g(); err != nil {
					break
				}
			}
			if err == nil {
				out, err = h(ctx, r)
			}
			if err != nil && r.Reply() == "" {
				o.unanswered(ctx, r, err)
				return
			}
			if err != nil {
				// Not r.Error: it records the error on the request, which
				// micro reads as soon as the handler has returned, while
				// this goroutine may still be writing (a data race).
				code, desc, body := errorReply(err)
				_ = r.Respond(body, micro.WithHeaders(micro.Headers{micro.ErrorHeader: {desc}, micro.ErrorCodeHeader: {code}}))
				return
			}
			if r.Reply() == "" {
				// Nobody to tell: a Respond would fail and record its error
				// on the request, which micro reads meanwhile (a race).
				return
			}
			body, err := json.Marshal(out)
			if err == nil && len(body) > maxReplyBytes {
				err = fmt.Errorf("%d bytes, more than a NATS message carries", len(body))
			}
			if err != nil {
				// Not sendable: say so, rather than leave the caller to
				// time out.
				code, desc, eb := errorReply(events.Errorf(events.CodeInternal, "%s: the reply could not be sent: %v", subject, err))
				_ = r.Respond(eb, micro.WithHeaders(micro.Headers{micro.ErrorHeader: {desc}, micro.ErrorCodeHeader: {code}}))
				return
			}
			_ = r.Respond(body)
		}()
	})
}

func handle[Req any](ctx context.Context, v *events.Validator, subject string, body []byte, f Func[Req]) (any, error) {
	if err := v.ValidateCommand(subject, body); err != nil {
		return nil, err
	}
	var req Req
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s: the request is not valid JSON for this command: %v", subject, err)
	}
	return f(ctx, &req)
}

// RespondError sends err as a micro error reply.
func RespondError(r micro.Request, err error) {
	code, desc, body := errorReply(err)
	_ = r.Error(code, desc, body)
}

// errorReply is err as a micro error reply: its code, its one-line
// description and an ErrorReply body.
func errorReply(err error) (code, desc string, body []byte) {
	// The message without the code: a client prints "code: message", and
	// a code inside the message would be said twice.
	reply := ErrorReply{Code: commandCode(events.CodeOf(err)), Message: events.Message(err)}
	var a Answered
	if errors.As(err, &a) {
		ref := a.AnswerRef()
		reply.Answer = &ref
	}
	body, _ = json.Marshal(reply)
	return string(reply.Code), oneLine(reply.Message), body
}

// commandCode is an error's code as a command's reply gives it: what the
// event contract refuses in what the request made heed write (a field too
// long for its event, say) is the request's fault, invalid_request, as
// the commands document; the message still names the field.
func commandCode(c events.Code) events.Code {
	switch c {
	case events.CodeSchemaViolation, events.CodeMissingAttribute, events.CodeUnknownType, events.CodeSubjectMismatch,
		events.CodeInvalidID, events.CodeTooLarge, events.CodeUndecodable:
		return events.CodeInvalidRequest
	}
	return c
}

// DecodeReply reads a command's reply into out (nil: ignore the body). A
// micro error reply comes back as an *events.Error with the command's code
// and message, wrapping the *ErrorReply.
func DecodeReply(subject string, msg *nats.Msg, out any) error {
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		reply := &ErrorReply{Code: events.Code(code), Message: msg.Header.Get(micro.ErrorHeader)}
		var body ErrorReply
		if json.Unmarshal(msg.Data, &body) == nil && body.Message != "" {
			reply.Message, reply.Answer = body.Message, body.Answer
		} else if len(msg.Data) > 0 {
			reply.Message = string(msg.Data)
		}
		return &events.Error{Code: reply.Code, Message: reply.Message, Err: reply}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return events.Errorf(events.CodeInternal, "%s: reply is not the expected JSON: %v", subject, err)
	}
	return nil
}

// Call sends a command over nc and decodes its reply into out. A busy
// service is asked again, after a short pause, until ctx ends.
func Call(ctx context.Context, nc *nats.Conn, subject string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		err := call(ctx, nc, subject, body, out)
		if events.CodeOf(err) != events.CodeBusy {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

func call(ctx context.Context, nc *nats.Conn, subject string, body []byte, out any) error {
	msg, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return events.Errorf(events.CodeUnavailable, "no service answers %s (is heed running with every service? commands: %s)", subject, allCommandsHelp)
		}
		return &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("%s: %v", subject, err), Err: err}
	}
	return DecodeReply(subject, msg, out)
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r", " "), "\n", "; ")
}
