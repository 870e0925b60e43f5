package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/tools/bridge"
)

// room is what a chat does for the shared poster: find what it posted
// before, post an offer, replace a post by the outcome.
type room interface {
	// history returns the requests posted before: confirmation id → the
	// chat's reference to the post.
	history(ctx context.Context) (map[string]string, error)
	post(ctx context.Context, o bridge.Offer) (ref string, err error)
	update(ctx context.Context, ref string, o bridge.Offer, outcome string) error
	name() string
}

// poster keeps one chat room in step with the pending requests: each is
// posted once (what the room's history shows as posted is not posted
// again), and updated in place when it closes.
type poster struct {
	c       *heedclient.Client
	room    room
	users   Users
	routing bridge.Routing
	log     *slog.Logger

	mu     sync.Mutex
	posted map[string]string // confirmation id → post reference
	offers map[string]bridge.Offer
}

func newPoster(c *heedclient.Client, r room, users Users, routing bridge.Routing, log *slog.Logger) *poster {
	if log == nil {
		log = slog.Default()
	}
	return &poster{c: c, room: r, users: users, routing: routing, log: log, posted: map[string]string{}, offers: map[string]bridge.Offer{}}
}

func (p *poster) run(ctx context.Context) error {
	earlier, err := p.room.history(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	for id, ref := range earlier {
		p.posted[id] = ref
	}
	p.mu.Unlock()
	updates, err := bridge.Watch(ctx, p.c, bridge.AnyIdentity, p.routing)
	if err != nil {
		return err
	}
	// What was posted and closed while the bridge was down: update it.
	for id, ref := range earlier {
		st, err := p.c.Confirmation(ctx, id)
		if err != nil || st.Open() {
			continue
		}
		o := bridge.NewOffer(st)
		p.update(ctx, ref, o, bridge.WinnerOf(st).Describe(o))
	}
	for u := range updates {
		if u.Closed {
			p.mu.Lock()
			ref := p.posted[u.Offer.ID]
			p.mu.Unlock()
			if ref != "" && u.Winner != nil {
				p.update(ctx, ref, u.Offer, u.Winner.Describe(u.Offer))
			}
			continue
		}
		p.post(ctx, u.Offer)
	}
	return ctx.Err()
}

// mapped reports whether someone in the room may answer the offer: it
// names no approvers, or one of them is a mapped user whose tier does not
// keep them off this chat.
func (p *poster) mapped(o bridge.Offer) bool {
	if len(o.Approvers) == 0 {
		return true
	}
	for _, who := range p.users {
		if slices.Contains(o.Approvers, who) && o.OnChannel(who, p.room.name()) {
			return true
		}
	}
	return false
}

func (p *poster) post(ctx context.Context, o bridge.Offer) {
	if !p.mapped(o) {
		return // nobody in this room may answer it
	}
	p.mu.Lock()
	_, done := p.posted[o.ID]
	p.offers[o.ID] = o
	p.mu.Unlock()
	if done {
		return
	}
	ref, err := p.room.post(ctx, o)
	if err != nil {
		p.log.Warn(p.room.name()+": post failed", "confirmation", o.ID, "err", err)
		return
	}
	p.mu.Lock()
	p.posted[o.ID] = ref
	p.mu.Unlock()
	p.log.Info(p.room.name()+": posted", "confirmation", o.ID, "ref", ref)
}

func (p *poster) update(ctx context.Context, ref string, o bridge.Offer, outcome string) {
	if err := p.room.update(ctx, ref, o, outcome); err != nil {
		p.log.Warn(p.room.name()+": update failed", "confirmation", o.ID, "err", err)
	}
}

// Refusal is why a click was not taken: said to the clicker and logged.
type Refusal struct {
	Status int
	Reason string
}

func (r *Refusal) Error() string { return r.Reason }

// answer sends a mapped user's click as the answer; what heed refuses is
// a *Refusal with the reason to tell the clicker. On success it returns
// the outcome text for the post.
func (p *poster) answer(ctx context.Context, id, choice, who, channel string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := bridge.Answer(ctx, p.c, id, choice, who, channel, "")
	if a, ok := bridge.IsAnswered(err); ok {
		return "", &Refusal{409, a.Msg}
	}
	if err != nil {
		if events.CodeOf(err) == events.CodeInvalidRequest || events.CodeOf(err) == events.CodeNotFound {
			return "", &Refusal{403, "not answered: " + events.Message(err)}
		}
		return "", err
	}
	p.log.Info(p.room.name()+": answered", "confirmation", id, "choice", choice, "by", who)
	p.mu.Lock()
	o := p.offers[id]
	p.mu.Unlock()
	if o.ID == "" {
		if st, err := p.c.Confirmation(ctx, id); err == nil {
			o = bridge.NewOffer(st)
		}
	}
	w := bridge.Winner{Choice: choice, By: who, Channel: channel, Method: events.MethodUser}
	return w.Describe(o), nil
}

// ref is the post of a request, if the poster made it.
func (p *poster) ref(id string) (string, bridge.Offer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.posted[id], p.offers[id]
}

var errNoPayload = errors.New("no payload")

// facts is the context line of a post: skill, step, run, operation, risk,
// tier, and the deadline (as the chat writes a time) with the default.
func facts(o bridge.Offer, when func(time.Time) string) string {
	var f []string
	if o.Skill != "" {
		f = append(f, "skill "+o.Skill)
	}
	if o.Step != "" {
		f = append(f, "step "+o.Step)
	}
	if o.RunID != "" {
		f = append(f, "run "+o.RunID)
	}
	if o.Operation != "" {
		f = append(f, strings.TrimSpace(o.Operation+" "+o.Scope+" "+o.Environment))
	}
	if o.Risk != nil {
		f = append(f, fmt.Sprintf("risk %.0f%%", *o.Risk*100))
	}
	if o.Tier != "" {
		f = append(f, "tier "+o.Tier)
	}
	if !o.Deadline.IsZero() {
		d := "deadline " + when(o.Deadline)
		if o.Default != "" {
			d += ", then " + o.Default
		}
		f = append(f, d)
	}
	return strings.Join(f, " · ")
}
