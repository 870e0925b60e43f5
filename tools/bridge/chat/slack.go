// Package chat is heed's chat bridge: each request the bridge routes is
// posted to a chat channel with one button per option; a click comes
// back to the bridge's HTTP endpoint, is verified, mapped to the clicking
// user's heed identity and sent as the answer; the message is then updated
// in place with the outcome, whichever channel answered.
package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/tools/bridge"
	"github.com/slack-go/slack"
)

// SlackChannel is the channel name answers from Slack carry.
const SlackChannel = "slack"

// blockPrefix marks the action block of a posted request: its block id is
// blockPrefix + the confirmation id, which is how a restarted bridge finds
// what it posted before (the channel's history is the record).
const blockPrefix = "heed:"

// donePrefix marks the outcome block that replaces the buttons.
const donePrefix = "heed-done:"

// Slack posts requests to one Slack channel and takes the button clicks.
type Slack struct {
	Client  *heedclient.Client
	API     *slack.Client
	Channel string // channel id
	// SigningSecret verifies that a click comes from Slack (HMAC of the
	// body and its timestamp, at most 5 minutes old).
	SigningSecret string
	Users         Users
	Routing       bridge.Routing
	Log           *slog.Logger
	// HistoryLimit is how many of the channel's latest messages are read
	// at start to find what was posted before (default 1,000).
	HistoryLimit int

	mu     sync.Mutex
	posted map[string]string // confirmation id → message ts
	offers map[string]bridge.Offer
}

// Users maps chat users to heed identities ("U024BE7LH": "alice").
type Users map[string]string

func (s *Slack) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Run posts and updates until ctx ends. Requests posted before (found in
// the channel's history) are not posted again; those that closed while
// the bridge was down are updated.
func (s *Slack) Run(ctx context.Context) error {
	s.mu.Lock()
	s.posted, s.offers = map[string]string{}, map[string]bridge.Offer{}
	s.mu.Unlock()
	if err := s.readHistory(ctx); err != nil {
		return err
	}
	updates, err := bridge.Watch(ctx, s.Client, bridge.AnyIdentity, s.Routing)
	if err != nil {
		return err
	}
	// What was posted and is no longer open: update it now.
	s.mu.Lock()
	earlier := make(map[string]string, len(s.posted))
	for id, ts := range s.posted {
		earlier[id] = ts
	}
	s.mu.Unlock()
	for id, ts := range earlier {
		st, err := s.Client.Confirmation(ctx, id)
		if err != nil || st.Open() {
			continue
		}
		o := bridge.NewOffer(st)
		s.update(ctx, ts, o, bridge.WinnerOf(st).Describe(o))
	}
	for u := range updates {
		if u.Closed {
			s.mu.Lock()
			ts := s.posted[u.Offer.ID]
			s.mu.Unlock()
			if ts != "" && u.Winner != nil {
				s.update(ctx, ts, u.Offer, u.Winner.Describe(u.Offer))
			}
			continue
		}
		s.post(ctx, u.Offer)
	}
	return ctx.Err()
}

func (s *Slack) readHistory(ctx context.Context) error {
	limit := s.HistoryLimit
	if limit <= 0 {
		limit = 1000
	}
	cursor := ""
	seen := 0
	for seen < limit {
		h, err := s.API.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: s.Channel, Cursor: cursor, Limit: min(200, limit-seen)})
		if err != nil {
			return fmt.Errorf("slack: read the channel's history (to post nothing twice): %w", err)
		}
		for _, m := range h.Messages {
			for _, b := range m.Blocks.BlockSet {
				if a, ok := b.(*slack.ActionBlock); ok && strings.HasPrefix(a.BlockID, blockPrefix) {
					s.mu.Lock()
					s.posted[strings.TrimPrefix(a.BlockID, blockPrefix)] = m.Timestamp
					s.mu.Unlock()
				}
			}
		}
		seen += len(h.Messages)
		if !h.HasMore || h.ResponseMetaData.NextCursor == "" || len(h.Messages) == 0 {
			break
		}
		cursor = h.ResponseMetaData.NextCursor
	}
	return nil
}

// Blocks is the Block Kit message of an offer: its title, message, what
// to weigh and one button per option; closed (outcome set), the buttons
// give way to the outcome.
func Blocks(o bridge.Offer, outcome string, now time.Time) []slack.Block {
	title := o.Title
	if len(title) > 150 {
		title = title[:147] + "..."
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, title, false, false)),
	}
	if msg := strings.TrimSpace(o.Message); msg != "" {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.PlainTextType, msg, false, false), nil, nil))
	}
	var facts []string
	if o.Skill != "" {
		facts = append(facts, "skill "+o.Skill)
	}
	if o.Step != "" {
		facts = append(facts, "step "+o.Step)
	}
	if o.RunID != "" {
		facts = append(facts, "run "+o.RunID)
	}
	if o.Operation != "" {
		facts = append(facts, strings.TrimSpace(o.Operation+" "+o.Scope+" "+o.Environment))
	}
	if o.Risk != nil {
		facts = append(facts, fmt.Sprintf("risk %.0f%%", *o.Risk*100))
	}
	if o.Tier != "" {
		facts = append(facts, "tier "+o.Tier)
	}
	if !o.Deadline.IsZero() {
		d := fmt.Sprintf("deadline <!date^%d^{time}|%s>", o.Deadline.Unix(), o.Deadline.UTC().Format(time.RFC3339))
		if o.Default != "" {
			d += ", then " + o.Default
		}
		facts = append(facts, d)
	}
	if len(facts) > 0 {
		blocks = append(blocks, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, strings.Join(facts, " · "), false, false)))
	}
	if outcome != "" {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "*"+outcome+"*", false, false), nil, nil, slack.SectionBlockOptionBlockID(donePrefix+o.ID)))
		return blocks
	}
	var buttons []slack.BlockElement
	for _, opt := range o.Options {
		b := slack.NewButtonBlockElement("choice:"+opt.Value, o.ID+"|"+opt.Value, slack.NewTextBlockObject(slack.PlainTextType, opt.Label, false, false))
		if opt.Value == o.Default {
			b.Style = slack.StylePrimary
		}
		buttons = append(buttons, b)
	}
	return append(blocks, slack.NewActionBlock(blockPrefix+o.ID, buttons...))
}

// mapped reports whether someone in the channel may answer the offer:
// it names no approvers, or one of them is a mapped user.
func (s *Slack) mapped(o bridge.Offer) bool {
	if len(o.Approvers) == 0 {
		return true
	}
	for _, who := range s.Users {
		if slices.Contains(o.Approvers, who) {
			return true
		}
	}
	return false
}

func (s *Slack) post(ctx context.Context, o bridge.Offer) {
	if !s.mapped(o) {
		return // nobody in this channel may answer it
	}
	s.mu.Lock()
	_, done := s.posted[o.ID]
	s.offers[o.ID] = o
	s.mu.Unlock()
	if done {
		return
	}
	_, ts, err := s.API.PostMessageContext(ctx, s.Channel, slack.MsgOptionText(o.Title, false), slack.MsgOptionBlocks(Blocks(o, "", time.Now())...))
	if err != nil {
		s.log().Warn("slack: post failed", "confirmation", o.ID, "err", err)
		return
	}
	s.mu.Lock()
	s.posted[o.ID] = ts
	s.mu.Unlock()
	s.log().Info("slack: posted", "confirmation", o.ID, "ts", ts)
}

func (s *Slack) update(ctx context.Context, ts string, o bridge.Offer, outcome string) {
	if _, _, _, err := s.API.UpdateMessageContext(ctx, s.Channel, ts, slack.MsgOptionText(o.Title+": "+outcome, false), slack.MsgOptionBlocks(Blocks(o, outcome, time.Now())...)); err != nil {
		s.log().Warn("slack: update failed", "confirmation", o.ID, "err", err)
	}
}

// Refusal is why a click was not taken: said to the clicker and logged.
type Refusal struct {
	Status int
	Reason string
}

func (r *Refusal) Error() string { return r.Reason }

// ServeHTTP takes Slack's interactivity callbacks (a button click):
// verified with the signing secret (at most 5 minutes old), the user
// mapped to an identity, the choice sent as the answer. Refused clicks get
// a clear reply and a log line; no secret is ever logged.
func (s *Slack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := s.click(r)
	var ref *Refusal
	switch {
	case err == nil:
		w.WriteHeader(http.StatusOK)
	case errors.As(err, &ref):
		s.log().Warn("slack: click refused", "reason", ref.Reason, "remote", r.RemoteAddr)
		http.Error(w, ref.Reason, ref.Status)
	default:
		s.log().Warn("slack: click failed", "err", err)
		http.Error(w, "heed could not take the answer: "+err.Error(), http.StatusServiceUnavailable)
	}
}

func (s *Slack) click(r *http.Request) error {
	if r.Method != http.MethodPost {
		return &Refusal{http.StatusMethodNotAllowed, "POST only"}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return &Refusal{http.StatusBadRequest, "unreadable body"}
	}
	v, err := slack.NewSecretsVerifier(r.Header, s.SigningSecret)
	if errors.Is(err, slack.ErrExpiredTimestamp) {
		return &Refusal{http.StatusUnauthorized, "stale or replayed request: its timestamp is more than 5 minutes off"}
	}
	if err != nil {
		return &Refusal{http.StatusUnauthorized, "unsigned request: " + err.Error()}
	}
	_, _ = v.Write(body)
	if err := v.Ensure(); err != nil {
		return &Refusal{http.StatusUnauthorized, "bad signature"}
	}
	form, err := parseForm(body)
	if err != nil {
		return &Refusal{http.StatusBadRequest, "no payload"}
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(form), &cb); err != nil {
		return &Refusal{http.StatusBadRequest, "payload: " + err.Error()}
	}
	if len(cb.ActionCallback.BlockActions) == 0 {
		return &Refusal{http.StatusBadRequest, "no action in the payload"}
	}
	act := cb.ActionCallback.BlockActions[0]
	id, choice, ok := strings.Cut(act.Value, "|")
	if !ok || !events.ValidID(id) {
		return &Refusal{http.StatusBadRequest, "the button does not name a heed request"}
	}
	who, ok := s.Users[cb.User.ID]
	if !ok {
		s.tell(r.Context(), cb.User.ID, "heed: you are not mapped to a heed identity, so heed cannot take your answer (ask an operator to add "+cb.User.ID+" to the chat bridge's users)")
		return &Refusal{http.StatusForbidden, "unknown chat user " + cb.User.ID}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	_, err = bridge.Answer(ctx, s.Client, id, choice, who, SlackChannel, "")
	if a, ok := bridge.IsAnswered(err); ok {
		s.tell(ctx, cb.User.ID, "heed: "+a.Msg)
		return &Refusal{http.StatusConflict, a.Msg}
	}
	if err != nil {
		if events.CodeOf(err) == events.CodeInvalidRequest || events.CodeOf(err) == events.CodeNotFound {
			s.tell(ctx, cb.User.ID, "heed: not answered: "+events.Message(err))
			return &Refusal{http.StatusForbidden, events.Message(err)}
		}
		return err
	}
	s.log().Info("slack: answered", "confirmation", id, "choice", choice, "by", who)
	s.mu.Lock()
	ts, o := s.posted[id], s.offers[id]
	s.mu.Unlock()
	if ts != "" {
		if o.ID == "" {
			if st, err := s.Client.Confirmation(ctx, id); err == nil {
				o = bridge.NewOffer(st)
			}
		}
		w := bridge.Winner{Choice: choice, By: who, Channel: SlackChannel, Method: events.MethodUser}
		s.update(ctx, ts, o, w.Describe(o))
	}
	return nil
}

func parseForm(body []byte) (string, error) {
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return "", err
	}
	p := v.Get("payload")
	if p == "" {
		return "", errors.New("no payload")
	}
	return p, nil
}

// tell says something to one user in the channel, only they see it.
func (s *Slack) tell(ctx context.Context, user, text string) {
	if _, err := s.API.PostEphemeralContext(ctx, s.Channel, user, slack.MsgOptionText(text, false)); err != nil {
		s.log().Warn("slack: could not tell the user", "user", user, "err", err)
	}
}
