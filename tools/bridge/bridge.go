// Package bridge is what every notification channel shares (the desktop
// bridge, the chat bridge): which pending requests a person is offered on
// a channel, what an offer shows, and how an answer is sent. It speaks
// only the contract, through the client package, so a bridge runs next to
// `heed up` or on a person's own machine against a remote NATS.
package bridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/heedhq/heed/lib/textutil"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/nats-io/nats.go/jetstream"
)

// Option is one choice of an offer.
type Option struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// Offer is what a channel shows for one pending request: a confirmation
// for a run's step, a question asked directly, or an escalation offered
// to a tier of approvers.
type Offer struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Message   string    `json:"message"`
	Options   []Option  `json:"options"`
	Default   string    `json:"default,omitempty"`
	Deadline  time.Time `json:"deadline,omitzero"` // zero: not known
	Skill     string    `json:"skill,omitempty"`
	Step      string    `json:"step,omitempty"`
	RunID     string    `json:"run_id,omitempty"`
	Approvers []string  `json:"approvers,omitempty"`
	// An escalation offered to a tier (the escalator's confirmation).
	EscalationID string   `json:"escalation_id,omitempty"`
	Operation    string   `json:"operation,omitempty"`
	Scope        string   `json:"scope,omitempty"`
	Environment  string   `json:"environment,omitempty"`
	Risk         *float64 `json:"risk,omitempty"`
	Tier         string   `json:"tier,omitempty"`
	// Dialog: the request asks to be shown as a dialog that stays until
	// answered (its context has "dialog": true), not a notification.
	Dialog bool `json:"dialog,omitempty"`
	// Channels are, for an escalation offer, the channels each tier
	// member uses (the escalator's config); a member with none listed is
	// reachable on any.
	Channels map[string][]string `json:"channels,omitempty"`
	// Remember says the request lets a person's choice be remembered for
	// its skill step (learn_preference): a channel may offer "remember".
	Remember bool `json:"remember,omitempty"`
}

// OnChannel reports whether the offer may be shown to who on channel:
// always, unless the tier lists who's channels without this one.
func (o Offer) OnChannel(who, channel string) bool {
	list := o.Channels[who]
	return len(list) == 0 || channel == "" || slices.Contains(list, channel)
}

// NewOffer reads an offer from a confirmation's state.
func NewOffer(st *confirmation.State) Offer {
	o := Offer{ID: st.ID}
	req := st.Request
	if req == nil {
		return o
	}
	// What a requester wrote reaches desktops and chats made safe to show
	// (textutil): no escape sequences, no direction marks that reorder
	// what a person reads before choosing. Values stay as they are: they
	// are what the answer sends back.
	o.Title, o.Message, o.Skill, o.Step, o.RunID = textutil.OneLine(req.Title), textutil.Lines(req.Message), req.Skill, req.Step, req.RunID
	o.Default = confirmation.DefaultChoice(req)
	o.Approvers = slices.Clone(req.Approvers)
	o.Remember = req.LearnPreference && req.Skill != "" && req.Step != ""
	for _, opt := range req.Options {
		o.Options = append(o.Options, Option{Label: textutil.OneLine(opt.Label), Value: opt.Value})
	}
	if len(o.Options) == 0 {
		o.Options = []Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}}
	}
	if o.Title == "" {
		o.Title = strings.TrimSpace(strings.Join([]string{req.Skill, req.Step}, " / "))
		if o.Title == "/" || o.Title == "" {
			o.Title = "heed: a question"
		}
	}
	o.Deadline = st.Deadline()
	ctx := req.Context
	str := func(k string) string { s, _ := ctx[k].(string); return s }
	o.EscalationID, o.Operation, o.Scope, o.Tier = str("escalation_id"), str("operation"), str("scope"), str("tier")
	o.Environment = str("environment")
	if r, ok := ctx["risk"].(float64); ok {
		o.Risk = &r
	}
	o.Dialog, _ = ctx["dialog"].(bool)
	if chans, ok := ctx["channels"].(map[string]any); ok {
		o.Channels = map[string][]string{}
		for who, v := range chans {
			list, _ := v.([]any)
			for _, c := range list {
				if name, ok := c.(string); ok {
					o.Channels[who] = append(o.Channels[who], name)
				}
			}
		}
	}
	return o
}

// AnyIdentity watches for every person (a shared channel such as a chat
// room, where each click is judged by its clicker's identity).
const AnyIdentity = "*"

// MayAnswer reports whether who may answer a confirmation: anyone when it
// names no approvers, else one of them (AnyIdentity: anyone).
func MayAnswer(st *confirmation.State, who string) bool {
	if who == AnyIdentity || st == nil || st.Request == nil || len(st.Request.Approvers) == 0 {
		return true
	}
	return slices.Contains(st.Request.Approvers, who)
}

// Route selects requests for a channel. Every field that is set must
// match; an empty route matches everything.
type Route struct {
	// Skills are glob patterns (path.Match) of skill names.
	Skills []string `yaml:"skills,omitempty" json:"skills,omitempty"`
	// Tiers are escalation tiers; a route with tiers takes only escalation
	// offers to one of them.
	Tiers []string `yaml:"tiers,omitempty" json:"tiers,omitempty"`
	// Environments are escalation environments (prod, stage, …).
	Environments []string `yaml:"environments,omitempty" json:"environments,omitempty"`
	// Escalations: "only" takes only escalation offers, "none" none of
	// them; empty takes both.
	Escalations string `yaml:"escalations,omitempty" json:"escalations,omitempty"`
}

// Matches reports whether the route takes the offer.
func (r Route) Matches(o Offer) bool {
	if len(r.Skills) > 0 && !slices.ContainsFunc(r.Skills, func(p string) bool { ok, _ := path.Match(p, o.Skill); return ok }) {
		return false
	}
	if len(r.Tiers) > 0 && !slices.Contains(r.Tiers, o.Tier) {
		return false
	}
	if len(r.Environments) > 0 && !slices.Contains(r.Environments, o.Environment) {
		return false
	}
	switch r.Escalations {
	case "only":
		return o.EscalationID != ""
	case "none":
		return o.EscalationID == ""
	}
	return true
}

// Routing is a channel's choice of requests: any of its routes (none:
// every request the identity may answer).
type Routing struct {
	Routes []Route `yaml:"routes,omitempty" json:"routes,omitempty"`
	// Channel is the bridge's channel name (set by the bridge, not the
	// file): an escalation offer whose tier lists the person's channels
	// without this one is not shown here.
	Channel string `yaml:"-" json:"-"`
}

// Matches reports whether any route takes the offer.
func (r Routing) Matches(o Offer) bool {
	if len(r.Routes) == 0 {
		return true
	}
	return slices.ContainsFunc(r.Routes, func(rt Route) bool { return rt.Matches(o) })
}

// Winner is the answer that closed a request.
type Winner struct {
	Choice  string `json:"choice"`
	By      string `json:"by,omitempty"`
	Channel string `json:"channel,omitempty"`
	Method  string `json:"method"`
}

// Describe says how a request closed, for a channel to show in place of
// its buttons: "approved by alice via slack", "expired: default cancel".
func (w Winner) Describe(o Offer) string {
	label := w.Choice
	for _, opt := range o.Options {
		if opt.Value == w.Choice && opt.Label != "" {
			label = opt.Label
		}
	}
	switch w.Method {
	case events.MethodTimeout:
		return fmt.Sprintf("expired: default %s", label)
	case events.MethodUser, events.MethodAgent:
		s := fmt.Sprintf("%s by %s", label, orSomeone(w.By))
		if w.Channel != "" {
			s += " via " + w.Channel
		}
		return s
	}
	return fmt.Sprintf("%s (%s)", label, w.Method)
}

func orSomeone(s string) string {
	if s == "" {
		return "someone"
	}
	return s
}

// Update is a change a channel acts on: a new offer, or one that closed.
type Update struct {
	Offer  Offer
	Closed bool
	Winner *Winner // set when Closed
}

// Settle is how long a new request is held before it is offered: the
// confirm router's fast layers (--yes, a rule, a remembered choice)
// answer within milliseconds, and a person should not be notified of a
// question that is answered already.
const Settle = 150 * time.Millisecond

// Watch delivers the requests identity may answer that routing takes:
// every open one first (those that arrived while the channel was down
// included), then each new one, and a Closed update when one is answered
// anywhere or expires. A watch lost to a NATS restart or a network
// outage is taken up again (every second, then less often, up to 10 s):
// what was offered is not offered again, and what closed meanwhile is
// reported closed. The channel closes when ctx ends.
func Watch(ctx context.Context, c *heedclient.Client, identity string, routing Routing) (<-chan Update, error) {
	pending, err := c.WatchPending(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan Update, 64)
	w := &watcher{c: c, identity: identity, routing: routing, out: out,
		offered: map[string]Offer{}, held: map[string]*confirmation.State{}, since: map[string]time.Time{}}
	go func() {
		defer close(out)
		for {
			if !w.run(ctx, pending) {
				return
			}
			// The watch is lost: take it up again.
			wait := time.Second
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				if pending, err = c.WatchPending(ctx); err == nil {
					break
				}
				wait = min(wait*2, 10*time.Second)
			}
			if !w.reconcile(ctx) {
				return
			}
		}
	}()
	return out, nil
}

type watcher struct {
	c        *heedclient.Client
	identity string
	routing  Routing
	out      chan<- Update
	offered  map[string]Offer
	held     map[string]*confirmation.State
	since    map[string]time.Time
}

func (w *watcher) send(ctx context.Context, u Update) bool {
	select {
	case w.out <- u:
		return true
	case <-ctx.Done():
		return false
	}
}

// run follows one watch until it ends; false when ctx ended (or the
// receiver is gone).
func (w *watcher) run(ctx context.Context, pending <-chan heedclient.Pending) bool {
	tick := time.NewTicker(Settle / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			for id, st := range w.held {
				if time.Since(w.since[id]) < Settle {
					continue
				}
				delete(w.held, id)
				delete(w.since, id)
				o := NewOffer(st)
				o.Deadline = deadline(ctx, w.c.JetStream(), id, o.Deadline)
				w.offered[id] = o
				if !w.send(ctx, Update{Offer: o}) {
					return false
				}
			}
		case p, ok := <-pending:
			if !ok {
				return ctx.Err() == nil
			}
			if p.Closed {
				delete(w.held, p.ID)
				delete(w.since, p.ID)
				o, was := w.offered[p.ID]
				if !was {
					continue
				}
				delete(w.offered, p.ID)
				if !w.send(ctx, Update{Offer: o, Closed: true, Winner: WinnerOf(p.State)}) {
					return false
				}
				continue
			}
			if _, was := w.offered[p.ID]; was {
				continue // offered before the watch was taken up again
			}
			if !MayAnswer(p.State, w.identity) {
				continue
			}
			if o := NewOffer(p.State); !w.routing.Matches(o) || (w.identity != AnyIdentity && !o.OnChannel(w.identity, w.routing.Channel)) {
				continue
			}
			w.held[p.ID], w.since[p.ID] = p.State, time.Now()
		}
	}
}

// reconcile reports closed what was offered and closed while the watch
// was lost.
func (w *watcher) reconcile(ctx context.Context) bool {
	for id, o := range w.offered {
		st, err := w.c.Confirmation(ctx, id)
		if err != nil || st.Open() {
			continue
		}
		delete(w.offered, id)
		if !w.send(ctx, Update{Offer: o, Closed: true, Winner: WinnerOf(st)}) {
			return false
		}
	}
	return ctx.Err() == nil
}

// WinnerOf is the answer that closed a confirmation (method "unknown"
// when the state does not say).
func WinnerOf(st *confirmation.State) *Winner {
	if st == nil || st.Answer == nil {
		return &Winner{Method: "unknown"}
	}
	a := st.Answer
	return &Winner{Choice: a.Choice, By: a.By, Channel: a.Channel, Method: a.Method}
}

// deadline reads a confirmation's deadline from its schedule in the
// stream (the confirm router's, whatever its default timeout), else keeps
// what the request said.
func deadline(ctx context.Context, js jetstream.JetStream, id string, fallback time.Time) time.Time {
	s, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		return fallback
	}
	m, err := s.GetLastMsgForSubject(ctx, confirmation.ScheduleSubject(id))
	if err != nil {
		return fallback
	}
	at, ok := strings.CutPrefix(m.Header.Get("Nats-Schedule"), "@at ")
	if !ok {
		return fallback
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return fallback
	}
	return t
}

// ErrAnswered is an answer that came second: Winner took effect first.
type ErrAnswered struct {
	Winner Winner
	Msg    string
}

func (e *ErrAnswered) Error() string { return e.Msg }

// Answer sends identity's choice for request id from channel. An answer
// that another channel, a rule or the deadline beat is an *ErrAnswered
// naming who answered.
func Answer(ctx context.Context, c *heedclient.Client, id, choice, identity, channel, reason string) (command.AnswerReply, error) {
	rep, err := c.Answer(ctx, command.AnswerConfirmation{ID: id, Choice: choice, By: identity, Channel: channel, Reason: reason})
	if err == nil || events.CodeOf(err) != events.CodeConflict {
		return rep, err
	}
	st, lerr := c.Confirmation(ctx, id)
	if lerr != nil || st.Answer == nil {
		return rep, err
	}
	w := WinnerOf(st)
	return rep, &ErrAnswered{Winner: *w, Msg: "already answered: " + w.Describe(NewOffer(st))}
}

// IsAnswered reports whether err is an answer that came second.
func IsAnswered(err error) (*ErrAnswered, bool) {
	var a *ErrAnswered
	ok := errors.As(err, &a)
	return a, ok
}

// ReadRouting reads a routing file (YAML: routes with skills, tiers,
// environments, escalations); unknown keys are an error, so a misspelt
// one does not silently widen what a person is sent.
func ReadRouting(file string) (Routing, error) {
	var r Routing
	b, err := os.ReadFile(file)
	if err != nil {
		return r, events.Errorf(events.CodeInvalidRequest, "routing file: %v", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil && !errors.Is(err, io.EOF) {
		return r, events.Errorf(events.CodeInvalidRequest, "routing file %s: %s", file, OneLine(err))
	}
	for i, rt := range r.Routes {
		switch rt.Escalations {
		case "", "only", "none":
		default:
			return r, events.Errorf(events.CodeInvalidRequest, "routing file %s: route %d: escalations %q: use only or none", file, i+1, rt.Escalations)
		}
		for _, p := range rt.Skills {
			if _, err := path.Match(p, ""); err != nil {
				return r, events.Errorf(events.CodeInvalidRequest, "routing file %s: route %d: skill pattern %q: %v", file, i+1, p, err)
			}
		}
	}
	return r, nil
}

// OneLine is a YAML decoding error on one line (yaml.v3 lists each field
// on a line of its own), as heed's errors are.
func OneLine(err error) string {
	msg := strings.ReplaceAll(err.Error(), ":\n  ", ": ")
	return strings.ReplaceAll(msg, "\n  ", "; ")
}
