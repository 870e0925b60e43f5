package chat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/tools/bridge/chat"
)

// mattermost plays a Mattermost server's REST API v4 for posts: create,
// update, list a channel's posts.
type mattermost struct {
	mu    sync.Mutex
	next  int
	posts map[string]map[string]any
	order []string
	made  int
	auth  []string
}

func newMattermost() *mattermost { return &mattermost{posts: map[string]map[string]any{}} }

func (mm *mattermost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	mm.auth = append(mm.auth, r.Header.Get("Authorization"))
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v4/posts":
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		mm.next++
		mm.made++
		id := fmt.Sprintf("post%04d", mm.next)
		p["id"] = id
		mm.posts[id] = p
		mm.order = append([]string{id}, mm.order...)
		_ = json.NewEncoder(w).Encode(p)
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/api/v4/posts/"):
		id := strings.TrimPrefix(r.URL.Path, "/api/v4/posts/")
		if _, ok := mm.posts[id]; !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
			return
		}
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		p["id"] = id
		mm.posts[id] = p
		_ = json.NewEncoder(w).Encode(p)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v4/channels/"):
		_ = json.NewEncoder(w).Encode(map[string]any{"order": mm.order, "posts": mm.posts})
	default:
		http.Error(w, "not played here", http.StatusNotImplemented)
	}
}

// find returns the post made for request id and how many there are.
func (mm *mattermost) find(id string) (map[string]any, int) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	var found map[string]any
	n := 0
	for _, p := range mm.posts {
		if props, _ := p["props"].(map[string]any); props["heed_id"] == id {
			found, n = p, n+1
		}
	}
	return found, n
}

// action returns the context Mattermost would send for the button
// labelled label of post p.
func action(t *testing.T, p map[string]any, label string) map[string]any {
	t.Helper()
	props := p["props"].(map[string]any)
	for _, a := range props["attachments"].([]any) {
		for _, act := range a.(map[string]any)["actions"].([]any) {
			act := act.(map[string]any)
			if act["name"] == label {
				return act["integration"].(map[string]any)["context"].(map[string]any)
			}
		}
	}
	t.Fatalf("no button %q in %v", label, props)
	return nil
}

type mmRig struct {
	hook *httptest.Server
	stop func()
}

func startMattermostBridge(t *testing.T, c *heedclient.Client, mm *mattermost) *mmRig {
	t.Helper()
	api := httptest.NewServer(mm)
	t.Cleanup(api.Close)
	b := &chat.Mattermost{Client: c, URL: api.URL, Token: "bot-token", ChannelID: "town-square", Key: []byte("button-key"),
		Users: chat.Users{"mm-alice": "alice"}, Log: eventstest.Logger(t)}
	r := &mmRig{hook: httptest.NewServer(b)}
	b.CallbackURL = r.hook.URL
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-done; r.hook.Close() }) }
	t.Cleanup(r.stop)
	return r
}

func (r *mmRig) click(t *testing.T, user string, ctxv map[string]any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"user_id": user, "post_id": "x", "context": ctxv})
	resp, err := http.Post(r.hook.URL, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// TestMattermostPostsAndTakesAClick: a request is posted with a button
// per option (each carrying its signed context); a forged token and an
// unknown user are refused with a reason; a mapped user's click answers it
// (channel mattermost) and the reply updates the post in place; stopped,
// 10 requests arrive, restarted: each posted once.
func TestMattermostPostsAndTakesAClick(t *testing.T) {
	c := startHeed(t)
	mm := newMattermost()
	r := startMattermostBridge(t, c, mm)
	id := ask(t, c, events.ConfirmRequestedData{Title: "Restart the API?", Message: "prod", Skill: "ops", Step: "restart", TimeoutS: 600})
	var p map[string]any
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if p, _ = mm.find(id); p == nil {
			return fmt.Errorf("not posted yet")
		}
		return nil
	})
	b, _ := json.Marshal(p)
	for _, want := range []string{"Restart the API?", "skill ops", "step restart", "deadline", `"name":"Approve"`, `"name":"Reject"`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("post lacks %s: %s", want, b)
		}
	}
	if strings.Contains(string(b), "bot-token") {
		t.Fatal("the post carries the bot token")
	}
	approve := action(t, p, "Approve")

	forged := map[string]any{"id": id, "choice": "proceed", "token": strings.Repeat("0", 64)}
	if code, out := r.click(t, "mm-alice", forged); code != http.StatusUnauthorized || !strings.Contains(fmt.Sprint(out["ephemeral_text"]), "bad token") {
		t.Fatalf("forged token: %d %v", code, out)
	}
	swapped := map[string]any{"id": id, "choice": "cancel", "token": approve["token"]}
	if code, _ := r.click(t, "mm-alice", swapped); code != http.StatusUnauthorized {
		t.Fatalf("Approve's token for Reject: %d, want 401", code)
	}
	if code, out := r.click(t, "mm-mallory", approve); code != http.StatusForbidden || !strings.Contains(fmt.Sprint(out["ephemeral_text"]), "unknown chat user") {
		t.Fatalf("unknown user: %d %v", code, out)
	}
	code, out := r.click(t, "mm-alice", approve)
	if code != http.StatusOK || !strings.Contains(fmt.Sprint(out["update"]), "Approve by alice via mattermost") {
		t.Fatalf("click: %d %v", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Confirmation(ctx, id)
	if err != nil || st.Answer == nil || st.Answer.By != "alice" || st.Answer.Channel != chat.MattermostChannel {
		t.Fatalf("answer %+v (%v), want alice via mattermost", st.Answer, err)
	}
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		p, _ := mm.find(id)
		b, _ := json.Marshal(p)
		if !strings.Contains(string(b), "Approve by alice via mattermost") || strings.Contains(string(b), `"actions"`) {
			return fmt.Errorf("post not updated: %s", b)
		}
		return nil
	})

	r.stop()
	var ids []string
	for i := range 10 {
		ids = append(ids, ask(t, c, events.ConfirmRequestedData{Message: fmt.Sprintf("while down %d", i), TimeoutS: 600}))
	}
	startMattermostBridge(t, c, mm)
	eventstest.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		for _, id := range ids {
			if _, n := mm.find(id); n != 1 {
				return fmt.Errorf("%s posted %d times", id, n)
			}
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	mm.mu.Lock()
	made := mm.made
	mm.mu.Unlock()
	if made != 11 {
		t.Fatalf("%d posts made, want 11 (each request once)", made)
	}
	// An answer from elsewhere updates the post.
	if _, err := c.Answer(ctx, command.AnswerConfirmation{ID: ids[0], Choice: "cancel", By: "bob", Channel: "cli"}); err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		p, _ := mm.find(ids[0])
		b, _ := json.Marshal(p)
		if !strings.Contains(string(b), "Reject by bob via cli") {
			return fmt.Errorf("post not updated: %s", b)
		}
		return nil
	})
}

// TestChatPostSaysWhenTheRequestExpired: nobody answers before the
// deadline; the post is updated with the default that applied.
func TestChatPostSaysWhenTheRequestExpired(t *testing.T) {
	c := startHeed(t)
	mm := newMattermost()
	startMattermostBridge(t, c, mm)
	id := ask(t, c, events.ConfirmRequestedData{Title: "Clean the cache?", Message: "nobody will answer", Default: "cancel", TimeoutS: 1})
	eventstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		p, _ := mm.find(id)
		b, _ := json.Marshal(p)
		if !strings.Contains(string(b), "expired: default Reject") {
			return fmt.Errorf("post not updated with the expiry: %s", b)
		}
		return nil
	})
}
