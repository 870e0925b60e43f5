package client

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
)

// presence is one identity's subscription in this client, shared by its
// channels.
type presence struct {
	sub      *nats.Subscription
	channels map[string]int // channel → how many Present calls hold it
}

// Present makes identity reachable on channel: until stop is called, this
// client answers requests on events.PresenceSubject(identity) with the
// identity and every channel it is present on. The escalator asks there
// before it offers a tier: a member nobody answers for is unreachable, and
// a tier with no reachable member escalates at once.
//
// Several channels of one identity in one client share one subscription.
// It is in a queue group named after the identity, so that when several
// processes hold the same identity (two terminals, a terminal and a chat
// bridge) exactly one of them answers each request: any one is enough.
// stop is idempotent; the identity stays present while another channel
// holds it.
func (c *Client) Present(_ context.Context, identity, channel string) (stop func(), err error) {
	if identity == "" || channel == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "presence needs an identity and a channel")
	}
	subject := events.PresenceSubject(identity)
	c.presMu.Lock()
	defer c.presMu.Unlock()
	if c.present == nil {
		c.present = map[string]*presence{}
	}
	p := c.present[identity]
	if p == nil {
		p = &presence{channels: map[string]int{}}
		sub, err := c.nc.QueueSubscribe(subject, subject, func(m *nats.Msg) { c.answerPresence(identity, m) })
		if err != nil {
			return nil, &events.Error{Code: events.CodeUnavailable, Message: "presence of " + identity + ": " + err.Error(), Err: err}
		}
		p.sub = sub
		c.present[identity] = p
		// Present means reachable now: the subscription has reached the
		// server when Present returns.
		if err := c.nc.Flush(); err != nil {
			_ = sub.Unsubscribe()
			delete(c.present, identity)
			return nil, &events.Error{Code: events.CodeUnavailable, Message: "presence of " + identity + ": " + err.Error(), Err: err}
		}
	}
	p.channels[channel]++
	var once sync.Once
	return func() { once.Do(func() { c.leave(identity, channel) }) }, nil
}

func (c *Client) leave(identity, channel string) {
	c.presMu.Lock()
	p := c.present[identity]
	if p == nil {
		c.presMu.Unlock()
		return
	}
	if p.channels[channel]--; p.channels[channel] <= 0 {
		delete(p.channels, channel)
	}
	var sub *nats.Subscription
	if len(p.channels) == 0 {
		sub = p.sub
		delete(c.present, identity)
	}
	c.presMu.Unlock()
	if sub != nil {
		// Gone means gone when stop returns: until the server has the
		// unsubscribe it may hand this process a request meant for the
		// queue group, which would then go unanswered.
		_ = sub.Unsubscribe()
		_ = c.nc.FlushTimeout(time.Second)
	}
}

func (c *Client) answerPresence(identity string, m *nats.Msg) {
	c.presMu.Lock()
	reply := events.PresenceReply{Identity: identity, Channels: []string{}}
	if p := c.present[identity]; p != nil {
		for ch := range p.channels {
			reply.Channels = append(reply.Channels, ch)
		}
	}
	c.presMu.Unlock()
	slices.Sort(reply.Channels)
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}

// Reachable asks whether identity is present anywhere (the escalator's
// question, for tests and tools): its presence, or an error with code
// unavailable when nobody answers for it.
func (c *Client) Reachable(ctx context.Context, identity string) (events.PresenceReply, error) {
	var out events.PresenceReply
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	m, err := c.nc.RequestWithContext(ctx, events.PresenceSubject(identity), nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return out, events.Errorf(events.CodeUnavailable, "%s is not reachable: no channel of theirs is present", identity)
	}
	if err != nil {
		return out, &events.Error{Code: events.CodeUnavailable, Message: "presence of " + identity + ": " + err.Error(), Err: err}
	}
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return out, &events.Error{Code: events.CodeInternal, Message: "presence of " + identity + ": " + err.Error(), Err: err}
	}
	return out, nil
}
