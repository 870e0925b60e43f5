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

	once sync.Once
	p    *poster
}

// Users maps chat users to heed identities ("U024BE7LH": "alice").
type Users map[string]string

func (s *Slack) poster() *poster {
	s.once.Do(func() { s.p = newPoster(s.Client, s, s.Users, s.Routing, s.Log) })
	return s.p
}

func (s *Slack) name() string { return "slack" }

// Run posts and updates until ctx ends. Requests posted before (found in
// the channel's history) are not posted again; those that closed while
// the bridge was down are updated.
func (s *Slack) Run(ctx context.Context) error { return s.poster().run(ctx) }

func (s *Slack) history(ctx context.Context) (map[string]string, error) {
	limit := s.HistoryLimit
	if limit <= 0 {
		limit = 1000
	}
	out := map[string]string{}
	cursor := ""
	seen := 0
	for seen < limit {
		h, err := s.API.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: s.Channel, Cursor: cursor, Limit: min(200, limit-seen)})
		if err != nil {
			return nil, fmt.Errorf("slack: read the channel's history (to post nothing twice): %w", err)
		}
		for _, m := range h.Messages {
			for _, b := range m.Blocks.BlockSet {
				if a, ok := b.(*slack.ActionBlock); ok && strings.HasPrefix(a.BlockID, blockPrefix) {
					out[strings.TrimPrefix(a.BlockID, blockPrefix)] = m.Timestamp
				}
			}
		}
		seen += len(h.Messages)
		if !h.HasMore || h.ResponseMetaData.NextCursor == "" || len(h.Messages) == 0 {
			break
		}
		cursor = h.ResponseMetaData.NextCursor
	}
	return out, nil
}

func (s *Slack) post(ctx context.Context, o bridge.Offer) (string, error) {
	_, ts, err := s.API.PostMessageContext(ctx, s.Channel, slack.MsgOptionText(o.Title, false), slack.MsgOptionBlocks(Blocks(o, "")...))
	return ts, err
}

func (s *Slack) update(ctx context.Context, ts string, o bridge.Offer, outcome string) error {
	_, _, _, err := s.API.UpdateMessageContext(ctx, s.Channel, ts, slack.MsgOptionText(o.Title+": "+outcome, false), slack.MsgOptionBlocks(Blocks(o, outcome)...))
	return err
}

// Blocks is the Block Kit message of an offer: its title, message, what
// to weigh and one button per option; closed (outcome set), the buttons
// give way to the outcome.
func Blocks(o bridge.Offer, outcome string) []slack.Block {
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
	facts := facts(o, func(t time.Time) string {
		return fmt.Sprintf("<!date^%d^{time}|%s>", t.Unix(), t.UTC().Format(time.RFC3339)) // each reader's time zone
	})
	if facts != "" {
		blocks = append(blocks, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, facts, false, false)))
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
		s.poster().log.Warn("slack: click refused", "reason", ref.Reason, "remote", r.RemoteAddr)
		http.Error(w, ref.Reason, ref.Status)
	default:
		s.poster().log.Warn("slack: click failed", "err", err)
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
	p := s.poster()
	outcome, err := p.answer(r.Context(), id, choice, who, SlackChannel)
	var ref *Refusal
	if errors.As(err, &ref) {
		s.tell(r.Context(), cb.User.ID, "heed: "+ref.Reason)
		return err
	}
	if err != nil {
		return err
	}
	if ts, o := p.ref(id); ts != "" {
		if err := s.update(r.Context(), ts, o, outcome); err != nil {
			p.log.Warn("slack: update failed", "confirmation", id, "err", err)
		}
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
		return "", errNoPayload
	}
	return p, nil
}

// tell says something to one user in the channel, only they see it.
func (s *Slack) tell(ctx context.Context, user, text string) {
	if _, err := s.API.PostEphemeralContext(ctx, s.Channel, user, slack.MsgOptionText(text, false)); err != nil {
		s.poster().log.Warn("slack: could not tell the user", "user", user, "err", err)
	}
}
