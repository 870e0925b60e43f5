package main

// heed mcp driven by a real MCP client: the MCP Inspector's CLI mode
// (npm @modelcontextprotocol/inspector, installed by tools/ci/deps.sh),
// over stdio and over streamable HTTP, against heed up.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/tools/console"
)

const inspectorDir = "../mcp/testdata/inspector"

// inspector runs the Inspector's CLI with args and returns the JSON it
// printed (the first document).
func inspector(t *testing.T, args ...string) map[string]any {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(inspectorDir, "node_modules", ".bin", "mcp-inspector"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--cli"}, args...)...)
	cmd.Env = childEnv()
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("mcp-inspector --cli %s: %v\n%s\n%s", strings.Join(args, " "), err, out, stderr)
	}
	var doc map[string]any
	if err := json.NewDecoder(strings.NewReader(string(out))).Decode(&doc); err != nil {
		t.Fatalf("mcp-inspector printed no JSON: %v\n%s", err, out)
	}
	return doc
}

// structured is a tools/call result's structured content.
func structured(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	if isErr, _ := doc["isError"].(bool); isErr {
		t.Fatalf("tool error: %v", doc["content"])
	}
	sc, ok := doc["structuredContent"].(map[string]any)
	if !ok {
		t.Fatalf("no structured content: %v", doc)
	}
	return sc
}

func TestMCPWithTheInspector(t *testing.T) {
	if _, err := os.Stat(filepath.Join(inspectorDir, "node_modules", ".bin", "mcp-inspector")); err != nil {
		t.Skip("the MCP Inspector is not installed (tools/ci/deps.sh installs it; make test runs this)")
	}
	h := startHeedWithTools(t)
	skills, _ := filepath.Abs("../../skills")
	const sha = "0123456789abcdef0123456789abcdef01234567"

	// stdio, as a local MCP client's config starts it.
	stdio := []string{"-e", "HEED_NATS_URL=" + h.url, heedBin, "mcp", "--identity", "agent:inspector", "--skills", skills}
	list := inspector(t, append(stdio, "--method", "tools/list")...)
	tools, _ := list["tools"].([]any)
	found := map[string]bool{}
	for _, x := range tools {
		if m, ok := x.(map[string]any); ok {
			found[fmt.Sprint(m["name"])] = true
		}
	}
	for _, want := range []string{"skill_run", "skill_continue", "skill_retry_step", "decision_history", "check_known_issues"} {
		if !found[want] {
			t.Errorf("tools/list over stdio lacks %s: %v", want, found)
		}
	}
	// Streamable HTTP with a bearer token.
	token := "inspector-token-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "mcp-tokens.yaml")
	if err := os.WriteFile(tokens, []byte("users:\n  - {identity: \"agent:remote\", token_sha256: \""+console.HashToken(token)+"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	p := startProc(t, "heed mcp --listen", "--nats-url", h.url, "mcp", "--listen", listen, "--tokens", tokens, "--skills", skills)
	p.waitOutput("streamable HTTP on", 30*time.Second)
	url := "http://" + listen + "/mcp"
	overHTTP := []string{url, "--transport", "http", "--header", "Authorization: Bearer " + token}
	if list := inspector(t, append(overHTTP, "--method", "tools/list")...); len(list["tools"].([]any)) < 15 {
		t.Fatalf("tools/list over HTTP: %v", list)
	}

	// Over each transport: a run through pause → skill_continue →
	// completed, and a failure → skill_retry_step with the fix → the fix
	// learned (then forgotten, so that the next transport meets the
	// failure again instead of the healer fixing it).
	for _, tr := range []struct {
		name  string
		args  []string
		agent string
	}{{"stdio", stdio, "agent:inspector"}, {"http", overHTTP, "agent:remote"}} {
		call := func(tool string, args ...string) map[string]any {
			a := append(append([]string{}, tr.args...), "--method", "tools/call", "--tool-name", tool)
			for _, x := range args {
				a = append(a, "--tool-arg", x)
			}
			return structured(t, inspector(t, a...))
		}
		run := call("skill_run", "skill=release_prod", `inputs={"commit_sha":"`+sha+`"}`, "wait_s=20")
		if run["status"] != "paused" || !strings.Contains(fmt.Sprint(run["next"]), "skill_continue") {
			t.Fatalf("%s: skill_run: %v", tr.name, run)
		}
		if done := call("skill_continue", "run_id="+fmt.Sprint(run["run_id"]), "choice=proceed", "reason=reviewed", "wait_s=20"); done["status"] != "completed" {
			t.Fatalf("%s: skill_continue: %v", tr.name, done)
		}
		failed := call("skill_run", "skill=check_image", `inputs={"tag":"0123456"}`, "wait_s=30")
		if failed["status"] != "paused" || !strings.Contains(fmt.Sprint(failed["failure"]), "manifest unknown") {
			t.Fatalf("%s: a failed step: %v", tr.name, failed)
		}
		if retried := call("skill_retry_step", "run_id="+fmt.Sprint(failed["run_id"]), `args={"tag":"`+sha+`"}`, "reason=the registry keeps full shas", "wait_s=30"); retried["status"] != "completed" {
			t.Fatalf("%s: skill_retry_step: %v", tr.name, retried)
		}
		var fixID string
		checkFor(t, 20*time.Second, 200*time.Millisecond, func() error {
			out, _, code := runCLI(t, "--nats-url", h.url, "fixes", "list", "--json")
			var fixes []struct {
				ID     string `json:"id"`
				Tool   string `json:"tool"`
				Source string `json:"source"`
				By     string `json:"by"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &fixes) != nil {
				return fmt.Errorf("heed fixes list: %d %s", code, out)
			}
			for _, f := range fixes {
				if f.Tool == "quay_check" && f.Source == "agent" {
					fixID = f.ID
					return nil
				}
			}
			return fmt.Errorf("no fix learned from %s yet: %s", tr.agent, out)
		})
		if _, errOut, code := runCLI(t, "--nats-url", h.url, "fixes", "forget", fixID); code != 0 {
			t.Fatalf("forget %s: %s", fixID, errOut)
		}
		checkFor(t, 20*time.Second, 200*time.Millisecond, func() error {
			if out, _, _ := runCLI(t, "--nats-url", h.url, "fixes", "list", "--json"); strings.Contains(out, fixID) {
				return fmt.Errorf("the fix is still listed")
			}
			return nil
		})
	}
	// Without the token: refused.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("a call without the token: %d, want 401", res.StatusCode)
	}
}
