package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Requester sends a request and waits for the reply: a *nats.Conn.
type Requester interface {
	RequestMsgWithContext(ctx context.Context, msg *nats.Msg) (*nats.Msg, error)
}

// HeaderIdempotencyKey carries the call's idempotency key on NATS tools.
const HeaderIdempotencyKey = "Heed-Idempotency-Key"

// Request is what a NATS tool receives (JSON): the call.
type Request = Call

func requestNATS(ctx context.Context, nc Requester, s *Spec, c Call) Result {
	if nc == nil {
		return Result{Err: &Error{Kind: "unavailable", Message: "no NATS connection for nats tools"}}
	}
	body, _ := json.Marshal(c)
	msg := nats.NewMsg(s.Subject)
	msg.Data = body
	msg.Header.Set(HeaderIdempotencyKey, c.IdempotencyKey)
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return Result{Err: &Error{Kind: "unavailable", Message: fmt.Sprintf("tool %s: nobody serves %s", s.Name, s.Subject)}}
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			return Result{Err: &Error{Kind: "timeout", Message: fmt.Sprintf("tool %s timed out after %s", s.Name, s.timeout)}}
		case errors.Is(err, context.Canceled):
			return Result{Err: &Error{Kind: "cancelled", Message: fmt.Sprintf("tool %s cancelled", s.Name)}}
		}
		return Result{Err: &Error{Kind: "unavailable", Message: fmt.Sprintf("tool %s: %v", s.Name, err)}}
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		m := reply.Header.Get(micro.ErrorHeader)
		if m == "" {
			m = string(reply.Data)
		}
		return Result{Output: parseOutput(reply.Data), Err: &Error{Kind: code, Message: m}}
	}
	return Result{Output: parseOutput(reply.Data)}
}

// Handler implements a NATS tool.
type Handler func(ctx context.Context, req Request) (any, error)

// Serve registers a NATS tool with NATS' micro framework (discoverable with
// `nats micro ls`), served on heed.tool.<name> in a queue group so several
// instances share the load. Return a *tool.Error to choose the error kind.
func Serve(ctx context.Context, nc *nats.Conn, name, description string, h Handler) (micro.Service, error) {
	svc, err := micro.AddService(nc, micro.Config{Name: "heed-tool-" + name, Version: "1.0.0", Description: description})
	if err != nil {
		return nil, err
	}
	err = svc.AddEndpoint(name, micro.HandlerFunc(func(r micro.Request) {
		var req Request
		if err := json.Unmarshal(r.Data(), &req); err != nil {
			_ = r.Error("bad_request", "request is not a heed tool call: "+err.Error(), nil)
			return
		}
		out, err := h(ctx, req)
		if err != nil {
			var te *Error
			if errors.As(err, &te) {
				kind := te.Kind
				if kind == "" {
					kind = "tool"
				}
				_ = r.Error(kind, te.Message, nil)
				return
			}
			_ = r.Error("tool", err.Error(), nil)
			return
		}
		_ = r.RespondJSON(out)
	}), micro.WithEndpointSubject(SubjectPrefix+name))
	if err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return svc, nil
}
