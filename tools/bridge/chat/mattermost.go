package chat

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/tools/bridge"
)

// MattermostChannel is the channel name answers from Mattermost carry.
const MattermostChannel = "mattermost"

// Mattermost posts requests to a Mattermost channel through the bot API
// (interactive message attachments, one action button per option) and
// takes the clicks Mattermost sends to CallbackURL.
type Mattermost struct {
	Client *heedclient.Client
	// URL is the Mattermost server (https://chat.example.com); Token a
	// bot account's access token.
	URL, Token string
	ChannelID  string
	// CallbackURL is where Mattermost sends a click: this bridge's
	// /mattermost/actions as Mattermost reaches it.
	CallbackURL string
	// Key signs each button's context (HMAC-SHA256 of the request id and
	// the choice): a click is taken only with its token, so nobody who can
	// reach the bridge can forge one for another request or choice.
	Key     []byte
	Users   Users // Mattermost user id → heed identity
	Routing bridge.Routing
	Log     *slog.Logger
	HTTP    *http.Client
	// HistoryLimit is how many of the channel's latest posts are read at
	// start to find what was posted before (default 1,000).
	HistoryLimit int

	once sync.Once
	p    *poster
}

func (m *Mattermost) poster() *poster {
	m.once.Do(func() { m.p = newPoster(m.Client, m, m.Users, m.Routing, m.Log) })
	return m.p
}

func (m *Mattermost) name() string { return "mattermost" }

// Run posts and updates until ctx ends; see Slack.Run.
func (m *Mattermost) Run(ctx context.Context) error { return m.poster().run(ctx) }

func (m *Mattermost) httpc() *http.Client {
	if m.HTTP != nil {
		return m.HTTP
	}
	return &http.Client{Timeout: 10 * time.Second}
}

// api calls the Mattermost REST API v4.
func (m *Mattermost) api(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(m.URL, "/")+"/api/v4"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+m.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.httpc().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("mattermost %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// mmPost is the part of a Mattermost post the bridge writes and reads.
type mmPost struct {
	ID        string         `json:"id,omitempty"`
	ChannelID string         `json:"channel_id"`
	Message   string         `json:"message"`
	Props     map[string]any `json:"props,omitempty"`
}

// Token is the secret a button carries for request id and choice.
func (m *Mattermost) token(id, choice string) string {
	mac := hmac.New(sha256.New, m.Key)
	mac.Write([]byte(id + "|" + choice))
	return hex.EncodeToString(mac.Sum(nil))
}

// attachment is the interactive message attachment of an offer: its
// buttons, or (closed) the outcome in their place.
func (m *Mattermost) attachment(o bridge.Offer, outcome string) map[string]any {
	var lines []string
	if msg := strings.TrimSpace(o.Message); msg != "" {
		lines = append(lines, msg)
	}
	if f := facts(o, func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }); f != "" {
		lines = append(lines, "_"+f+"_")
	}
	a := map[string]any{"title": o.Title, "fallback": o.Title}
	if outcome != "" {
		lines = append(lines, "**"+outcome+"**")
		a["color"] = "#888888"
	} else {
		var actions []map[string]any
		for i, opt := range o.Options {
			style := "default"
			if opt.Value == o.Default {
				style = "primary"
			}
			actions = append(actions, map[string]any{
				"id": fmt.Sprintf("choice%d", i), "name": opt.Label, "type": "button", "style": style,
				"integration": map[string]any{"url": m.CallbackURL, "context": map[string]any{"id": o.ID, "choice": opt.Value, "token": m.token(o.ID, opt.Value)}},
			})
		}
		a["actions"] = actions
		a["color"] = "#1f6feb"
	}
	a["text"] = strings.Join(lines, "\n")
	return a
}

func (m *Mattermost) history(ctx context.Context) (map[string]string, error) {
	limit := m.HistoryLimit
	if limit <= 0 {
		limit = 1000
	}
	out := map[string]string{}
	for page := 0; page*200 < limit; page++ {
		var list struct {
			Order []string          `json:"order"`
			Posts map[string]mmPost `json:"posts"`
		}
		if err := m.api(ctx, http.MethodGet, fmt.Sprintf("/channels/%s/posts?page=%d&per_page=200", m.ChannelID, page), nil, &list); err != nil {
			return nil, fmt.Errorf("mattermost: read the channel's posts (to post nothing twice): %w", err)
		}
		for _, p := range list.Posts {
			if id, ok := p.Props["heed_id"].(string); ok && id != "" {
				out[id] = p.ID
			}
		}
		if len(list.Order) < 200 {
			break
		}
	}
	return out, nil
}

func (m *Mattermost) post(ctx context.Context, o bridge.Offer) (string, error) {
	var created mmPost
	err := m.api(ctx, http.MethodPost, "/posts", mmPost{ChannelID: m.ChannelID, Message: o.Title,
		Props: map[string]any{"heed_id": o.ID, "attachments": []any{m.attachment(o, "")}}}, &created)
	return created.ID, err
}

func (m *Mattermost) update(ctx context.Context, ref string, o bridge.Offer, outcome string) error {
	return m.api(ctx, http.MethodPut, "/posts/"+ref, mmPost{ID: ref, ChannelID: m.ChannelID, Message: o.Title,
		Props: map[string]any{"heed_id": o.ID, "attachments": []any{m.attachment(o, outcome)}}}, nil)
}

// mmAction is what Mattermost sends when a button is clicked.
type mmAction struct {
	UserID  string `json:"user_id"`
	PostID  string `json:"post_id"`
	Context struct {
		ID     string `json:"id"`
		Choice string `json:"choice"`
		Token  string `json:"token"`
	} `json:"context"`
}

// ServeHTTP takes Mattermost's action callbacks: the button's token
// checked, the user mapped to an identity, the choice sent as the answer.
// The reply updates the post in place, or tells the clicker why not
// (ephemeral_text); refusals are logged without any secret.
func (m *Mattermost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := m.poster()
	reply := map[string]any{}
	update, err := m.click(r)
	var ref *Refusal
	switch {
	case err == nil:
		reply["update"] = update
	case errors.As(err, &ref):
		p.log.Warn("mattermost: click refused", "reason", ref.Reason, "remote", r.RemoteAddr)
		reply["ephemeral_text"] = "heed: " + ref.Reason
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ref.Status)
		_ = json.NewEncoder(w).Encode(reply)
		return
	default:
		p.log.Warn("mattermost: click failed", "err", err)
		reply["ephemeral_text"] = "heed could not take the answer: " + err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reply)
}

func (m *Mattermost) click(r *http.Request) (map[string]any, error) {
	if r.Method != http.MethodPost {
		return nil, &Refusal{http.StatusMethodNotAllowed, "POST only"}
	}
	var a mmAction
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&a); err != nil {
		return nil, &Refusal{http.StatusBadRequest, "unreadable action: " + err.Error()}
	}
	id, choice := a.Context.ID, a.Context.Choice
	if !events.ValidID(id) || choice == "" {
		return nil, &Refusal{http.StatusBadRequest, "the button does not name a heed request"}
	}
	if !hmac.Equal([]byte(a.Context.Token), []byte(m.token(id, choice))) {
		return nil, &Refusal{http.StatusUnauthorized, "bad token: this button was not made by this bridge for this request and choice"}
	}
	who, ok := m.Users[a.UserID]
	if !ok {
		return nil, &Refusal{http.StatusForbidden, "unknown chat user " + a.UserID + ": not mapped to a heed identity (ask an operator to add them to the chat bridge's users)"}
	}
	p := m.poster()
	outcome, err := p.answer(r.Context(), id, choice, who, MattermostChannel)
	if err != nil {
		return nil, err
	}
	_, o := p.ref(id)
	if o.ID == "" {
		o = bridge.Offer{ID: id, Title: "heed"}
	}
	return map[string]any{"message": o.Title, "props": map[string]any{"heed_id": id, "attachments": []any{m.attachment(o, outcome)}}}, nil
}
