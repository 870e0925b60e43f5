package chat_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/tools/bridge/chat"
	"github.com/heedhq/heed/tools/bridge/internal/bridgetest"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"
)

// channel is the Slack channel as slacktest plays it, with the methods
// slacktest has no handler for (chat.update, conversations.history) and a
// chat.postMessage that keeps the blocks: every message as posted and
// updated, and what was said to single users.
type channel struct {
	mu        sync.Mutex
	next      int
	msgs      []*msg
	ephemeral []string
	posts     int
}

type msg struct {
	TS     string
	Text   string
	Blocks json.RawMessage
}

func (c *channel) bind(s slacktest.Customize) {
	s.Handle("/chat.postMessage", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		c.mu.Lock()
		c.next++
		c.posts++
		m := &msg{TS: fmt.Sprintf("1700000000.%06d", c.next), Text: r.FormValue("text"), Blocks: json.RawMessage(r.FormValue("blocks"))}
		c.msgs = append(c.msgs, m)
		c.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": r.FormValue("channel"), "ts": m.TS})
	})
	s.Handle("/chat.update", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range c.msgs {
			if m.TS == r.FormValue("ts") {
				m.Text, m.Blocks = r.FormValue("text"), json.RawMessage(r.FormValue("blocks"))
				_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": r.FormValue("channel"), "ts": m.TS, "text": m.Text})
				return
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "message_not_found"})
	})
	s.Handle("/conversations.history", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		var out []map[string]any
		for i := len(c.msgs) - 1; i >= 0; i-- {
			out = append(out, map[string]any{"type": "message", "ts": c.msgs[i].TS, "text": c.msgs[i].Text, "blocks": c.msgs[i].Blocks})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "messages": out, "has_more": false})
	})
	s.Handle("/chat.postEphemeral", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		c.mu.Lock()
		c.ephemeral = append(c.ephemeral, r.FormValue("user")+": "+r.FormValue("text"))
		c.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "message_ts": "1"})
	})
}

// find returns the message posted for confirmation id (nil if none) and
// how many there are.
func (c *channel) find(id string) (*msg, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var found *msg
	n := 0
	for _, m := range c.msgs {
		if strings.Contains(string(m.Blocks), `"heed:`+id+`"`) || strings.Contains(string(m.Blocks), `"heed-done:`+id+`"`) {
			cp := *m // a copy: chat.update changes the message under the lock
			found, n = &cp, n+1
		}
	}
	return found, n
}

func (c *channel) said() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.ephemeral, "\n")
}

const secret = "8f742231b10e8888abcd99yyyzzz85a5"

type rig struct {
	c     *heedclient.Client
	ch    *channel
	api   *slack.Client
	hook  *httptest.Server
	stop  func()
	users chat.Users
}

// startBridge runs a chat bridge against the fake channel; stop ends it.
func startBridge(t *testing.T, c *heedclient.Client, ch *channel, srv *slacktest.Server) *rig {
	t.Helper()
	r := &rig{c: c, ch: ch, users: chat.Users{"U0ALICE": "alice", "U0CAROL": "carol"}}
	r.api = slack.New("xoxb-test", slack.OptionAPIURL(srv.GetAPIURL()))
	b := &chat.Slack{Client: c, API: r.api, Channel: "C0HEED", SigningSecret: secret, Users: r.users, Log: eventstest.Logger(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	r.hook = httptest.NewServer(b)
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			r.hook.Close()
		})
	}
	t.Cleanup(r.stop)
	return r
}

var (
	startHeed = func(t *testing.T) *heedclient.Client { return bridgetest.Start(t) }
	ask       = bridgetest.Ask
)

// waitPosted waits until the request is posted to the channel.
func waitPosted(t *testing.T, ch *channel, id string) *msg {
	t.Helper()
	var m *msg
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if m, _ = ch.find(id); m == nil {
			return fmt.Errorf("not posted yet")
		}
		return nil
	})
	return m
}

// click sends Slack's interactivity callback for a button, signed with
// key at time at.
func (r *rig) click(t *testing.T, user, id, choice, key string, at time.Time) (int, string) {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user},
		"actions": []map[string]any{{"action_id": "choice:" + choice, "block_id": "heed:" + id, "value": id + "|" + choice, "type": "button"}},
	})
	body := "payload=" + url.QueryEscape(string(payload))
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte("v0:" + ts + ":" + body))
	req, _ := http.NewRequest(http.MethodPost, r.hook.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	sb.Write(buf[:n])
	return resp.StatusCode, sb.String()
}

// TestSlackPostsAndTakesASignedClick: a pending request is posted with a
// button per option and its context; a correctly signed click from a
// mapped user answers it (channel slack, that identity) and the message is
// updated in place; a bad signature, a request older than 5 minutes and an
// unknown user are refused and change nothing; a click that comes second
// is told who answered.
func TestSlackPostsAndTakesASignedClick(t *testing.T) {
	c := startHeed(t)
	ch := &channel{}
	srv := slacktest.NewTestServer(ch.bind)
	srv.Start()
	defer srv.Stop()
	r := startBridge(t, c, ch, srv)
	id := ask(t, c, events.ConfirmRequestedData{Title: "Deploy web to prod?", Message: "2.4.0, reviewed", Skill: "deploy", Step: "approve", TimeoutS: 600})

	m := waitPosted(t, ch, id)
	for _, want := range []string{`"type":"header"`, "Deploy web to prod?", "2.4.0, reviewed", "skill deploy", "step approve", "deadline", `"action_id":"choice:proceed"`, `"action_id":"choice:cancel"`, `"value":"` + id + `|proceed"`} {
		if !strings.Contains(string(m.Blocks), want) {
			t.Fatalf("posted blocks lack %s: %s", want, m.Blocks)
		}
	}

	now := time.Now()
	if code, body := r.click(t, "U0ALICE", id, "proceed", "wrong-secret", now); code != http.StatusUnauthorized || !strings.Contains(body, "bad signature") {
		t.Fatalf("bad signature: %d %q", code, body)
	}
	if code, body := r.click(t, "U0ALICE", id, "proceed", secret, now.Add(-6*time.Minute)); code != http.StatusUnauthorized || !strings.Contains(body, "5 minutes") {
		t.Fatalf("replay after 6 minutes: %d %q", code, body)
	}
	if code, body := r.click(t, "U0MALLORY", id, "proceed", secret, now); code != http.StatusForbidden || !strings.Contains(body, "unknown chat user") {
		t.Fatalf("unknown user: %d %q", code, body)
	}
	if !strings.Contains(ch.said(), "U0MALLORY: heed: you are not mapped") {
		t.Fatalf("the unknown user was not told why: %q", ch.said())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := c.Confirmation(ctx, id); err != nil || !st.Open() {
		t.Fatalf("after refused clicks the request must still wait: %v %+v", err, st)
	}

	if code, body := r.click(t, "U0ALICE", id, "proceed", secret, now); code != http.StatusOK {
		t.Fatalf("signed click: %d %q", code, body)
	}
	st, err := c.Confirmation(ctx, id)
	if err != nil || st.Answer == nil || st.Answer.By != "alice" || st.Answer.Channel != chat.SlackChannel || st.Answer.Method != events.MethodUser || st.Answer.Choice != "proceed" {
		t.Fatalf("answer %+v (%v), want proceed by alice via slack", st.Answer, err)
	}
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		m, _ := ch.find(id)
		if m == nil {
			return fmt.Errorf("message gone")
		}
		if !strings.Contains(string(m.Blocks), "Approve by alice via slack") || strings.Contains(string(m.Blocks), `"type":"actions"`) {
			return fmt.Errorf("message not updated in place: %s", m.Blocks)
		}
		return nil
	})
	if code, body := r.click(t, "U0CAROL", id, "cancel", secret, now); code != http.StatusConflict || !strings.Contains(body, "already answered") || !strings.Contains(body, "alice") {
		t.Fatalf("second click: %d %q", code, body)
	}
}

// TestSlackUpdatesWhenAnsweredElsewhere: answered from the CLI, the
// posted message says who answered and where.
func TestSlackUpdatesWhenAnsweredElsewhere(t *testing.T) {
	c := startHeed(t)
	ch := &channel{}
	srv := slacktest.NewTestServer(ch.bind)
	srv.Start()
	defer srv.Stop()
	startBridge(t, c, ch, srv)
	id := ask(t, c, events.ConfirmRequestedData{Message: "Rotate the keys?", TimeoutS: 600})
	waitPosted(t, ch, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Answer(ctx, command.AnswerConfirmation{ID: id, Choice: "cancel", By: "bob", Channel: "desktop"}); err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		m, _ := ch.find(id)
		if m == nil || !strings.Contains(string(m.Blocks), "Reject by bob via desktop") {
			return fmt.Errorf("not updated: %+v", m)
		}
		return nil
	})
}

// TestSlackPostsEachRequestOnceAcrossRestarts: the bridge is stopped, 10
// requests arrive, it starts again: each is posted exactly once, and what
// it had posted before is not posted again.
func TestSlackPostsEachRequestOnceAcrossRestarts(t *testing.T) {
	c := startHeed(t)
	ch := &channel{}
	srv := slacktest.NewTestServer(ch.bind)
	srv.Start()
	defer srv.Stop()
	r := startBridge(t, c, ch, srv)
	before := ask(t, c, events.ConfirmRequestedData{Message: "asked while the bridge runs", TimeoutS: 600})
	waitPosted(t, ch, before)
	r.stop()
	var ids []string
	for i := range 10 {
		ids = append(ids, ask(t, c, events.ConfirmRequestedData{Message: fmt.Sprintf("asked while the bridge is down %d", i), TimeoutS: 600}))
	}
	startBridge(t, c, ch, srv)
	eventstest.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		for _, id := range ids {
			if _, n := ch.find(id); n != 1 {
				return fmt.Errorf("%s posted %d times", id, n)
			}
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // anything posted twice would be by now
	for _, id := range append(ids, before) {
		if _, n := ch.find(id); n != 1 {
			t.Fatalf("%s posted %d times, want once", id, n)
		}
	}
	ch.mu.Lock()
	posts := ch.posts
	ch.mu.Unlock()
	if posts != 11 {
		t.Fatalf("%d posts, want 11", posts)
	}
}
