package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeMattermost plays the part of Mattermost's REST API that heed chat
// uses: create a post, update one, list a channel's posts.
type fakeMattermost struct {
	mu    sync.Mutex
	posts map[string]map[string]any
	made  int
}

func (f *fakeMattermost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/v4/posts":
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		f.made++
		p["id"] = fmt.Sprintf("post%d", f.made)
		f.posts[p["id"].(string)] = p
		_ = json.NewEncoder(w).Encode(p)
	case r.Method == http.MethodPut:
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		f.posts[strings.TrimPrefix(r.URL.Path, "/api/v4/posts/")] = p
		_ = json.NewEncoder(w).Encode(p)
	case r.Method == http.MethodGet:
		order := []string{}
		for id := range f.posts {
			order = append(order, id)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"order": order, "posts": f.posts})
	default:
		http.Error(w, "not played", http.StatusNotImplemented)
	}
}

// postsFor counts the posts made for each request id.
func (f *fakeMattermost) postsFor() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := map[string]int{}
	for _, p := range f.posts {
		if props, _ := p["props"].(map[string]any); props != nil {
			if id, _ := props["heed_id"].(string); id != "" {
				n[id]++
			}
		}
	}
	return n, f.made
}

// TestChatKilledAndRestartedPostsEachRequestOnce: heed chat is killed
// (SIGKILL), 10 requests arrive, it starts again: each of the 10 is
// posted once, and the request posted before the kill is not posted again.
func TestChatKilledAndRestartedPostsEachRequestOnce(t *testing.T) {
	url, dir := startHeedCLI(t)
	mm := &fakeMattermost{posts: map[string]map[string]any{}}
	api := httptest.NewServer(mm)
	defer api.Close()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := filepath.Join(dir, "chat.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen: %s\nmattermost:\n  url: %s\n  channel_id: town-square\n  token_env: HEED_TEST_MM_TOKEN\n  button_key_env: HEED_TEST_MM_KEY\n  callback_url: http://%s/mattermost/actions\nusers: {mm-alice: alice}\n", listen, api.URL, listen)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HEED_TEST_MM_TOKEN", "bot-token")
	t.Setenv("HEED_TEST_MM_KEY", "button-key")
	nc, _ := connect(t, url)
	ask := func(msg string) string {
		t.Helper()
		m, err := nc.Request("heed.cmd.confirm.request", []byte(fmt.Sprintf(`{"message":%q,"options":[{"label":"Go","value":"proceed"},{"label":"Stop","value":"cancel"}],"timeout_s":600,"requester":"test"}`, msg)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Result struct {
				ID string `json:"id"`
			} `json:"result"`
			ID string `json:"id"`
		}
		_ = json.Unmarshal(m.Data, &rep)
		id := rep.ID
		if id == "" {
			id = rep.Result.ID
		}
		if id == "" {
			t.Fatalf("request reply: %s", m.Data)
		}
		return id
	}
	chat := startProc(t, "heed chat", "--nats-url", url, "chat", cfg)
	first := ask("before the kill")
	checkFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		if n, _ := mm.postsFor(); n[first] != 1 {
			return fmt.Errorf("not posted yet")
		}
		return nil
	})
	if err := chat.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-chat.done
	var ids []string
	for i := range 10 {
		ids = append(ids, ask(fmt.Sprintf("while heed chat is down %d", i)))
	}
	startProc(t, "heed chat again", "--nats-url", url, "chat", cfg)
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		n, _ := mm.postsFor()
		for _, id := range ids {
			if n[id] != 1 {
				return fmt.Errorf("%s posted %d times", id, n[id])
			}
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	if n, made := mm.postsFor(); made != 11 || n[first] != 1 {
		t.Fatalf("%d posts made (want 11), the first request's %d (want 1)", made, n[first])
	}
}
