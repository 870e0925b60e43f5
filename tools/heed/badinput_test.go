package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// errLine is heed's one error shape: "heed: <code>: <message>".
var errLine = regexp.MustCompile(`^heed: ([a-z_]+): (.+)$`)

// Every bad input is refused before anything is written: exit 2, one line
// "heed: <code>: <message>" that says its code once (and, for a usage
// mistake, a hint how to get help), against a real heed up.
func TestBadInputExits2WithOneLine(t *testing.T) {
	t.Parallel()
	h := startHeedWithTools(t)
	dir := t.TempDir()
	badSkill := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badSkill, []byte("name: bad\nsteps:\n  - name: check\n    tool: quay_chek\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badEsc := filepath.Join(dir, "escalation.yaml")
	if err := os.WriteFile(badEsc, []byte("routing:\n  - {name: r1, when: 'risk > 0.5', tier: nowhere}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badRoutes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(badRoutes, []byte("routes:\n  - {skill: [deploy]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noUsers := filepath.Join(dir, "chat-nousers.yaml")
	if err := os.WriteFile(noUsers, []byte("listen: 127.0.0.1:0\nslack: {channel: C1, token_env: HEED_TEST_NONE, signing_secret_env: HEED_TEST_NONE}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noSecret := filepath.Join(dir, "chat-nosecret.yaml")
	if err := os.WriteFile(noSecret, []byte("listen: 127.0.0.1:0\nslack: {channel: C1, token_env: HEED_TEST_UNSET_TOKEN, signing_secret_env: HEED_TEST_UNSET_TOKEN}\nusers: {U1: alice}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	immediate := filepath.Join(dir, "calls-immediate.json")
	if err := os.WriteFile(immediate, []byte(`[{"tool":"read_task","args":{"task":"t1"}}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	noTask := filepath.Join(dir, "calls-notask.json")
	if err := os.WriteFile(noTask, []byte(`[{"tool":"set_task_title","args":{"title":"Fix login bug"}}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	notCalls := filepath.Join(dir, "calls-bad.json")
	if err := os.WriteFile(notCalls, []byte(`{"tool":"set_task_title"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	noHash := filepath.Join(dir, "users-nohash.yaml")
	if err := os.WriteFile(noHash, []byte("users:\n  - {identity: \"user:alice\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fix := []string{"fixes", "learn", "--pattern", "manifest unknown", "--description", "use the full sha"}
	for _, c := range []struct {
		name  string
		args  []string
		code  string
		want  string
		usage bool // a usage mistake: the hint follows
	}{
		{"runs --status weird", []string{"runs", "--status", "weird"}, "invalid_request", `--status "weird": use one of requested, running`, false},
		{"runs --status with a typo", []string{"runs", "--status", "faild"}, "invalid_request", `(did you mean "failed"?)`, false},
		{"up --sweep-quiet negative", []string{"up", "--sweep-quiet", "-1s"}, "invalid_request", `--sweep-quiet -1s: use a duration of 0 or more`, false},
		{"up --log-level loud", []string{"up", "--log-level", "loud"}, "invalid_request", `--log-level "loud": use debug, info, warn or error`, false},
		{"up --tools of a file that is not there", []string{"up", "--data", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:0", "--tools", filepath.Join(dir, "nope.yaml")}, "invalid_request", "--tools: tools file: open", false},
		{"up --rules that are not rules", []string{"up", "--data", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:0", "--rules", "../../skills/tools.yaml"}, "invalid_request", "--rules: ../../skills/tools.yaml: yaml: unmarshal errors: line 4: field tools not found", false},
		{"up --escalation-config routing to a tier it does not have", []string{"up", "--data", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:0", "--escalation-config", badEsc}, "invalid_request", `--escalation-config: ` + badEsc + `: routing r1: tier "nowhere" is not one of the tiers`, false},
		{"up --replicas 0", []string{"up", "--data", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:0", "--replicas", "0"}, "invalid_request", "--replicas 0: JetStream takes 1 to 5", false},
		{"fixes learn: unknown tool", append(fix, "--tool", "quay_chek", "--set", "tag=x"), "invalid_request", `tool "quay_chek" is not in the tools file ../../skills/tools.yaml (did you mean "quay_check"?)`, false},
		{"fixes learn: broken template", append(fix, "--tool", "quay_check", "--set", "tag={{ bogus("), "invalid_request", "args_patch.tag: template: unclosed {{", false},
		{"fixes learn: unknown action tool", append(fix, "--tool", "quay_check", "--action-tool", "nosuch"), "invalid_request", `action tool "nosuch" is not in the tools file`, false},
		{"fixes learn: nothing to change", append(fix, "--tool", "quay_check"), "invalid_request", "a fix needs --set args and/or an --action-tool", true},
		{"fixes forget: unknown id", []string{"fixes", "forget", "fix-00000000000000000000"}, "not_found", `no learned fix "fix-00000000000000000000"`, false},
		{"skill lint: unknown tool, no --tools", []string{"skill", "lint", badSkill}, "", "", false},
		{"events tail: a filter nothing matches", []string{"events", "tail", "foo.bar"}, "invalid_request", `"foo.bar" matches none of heed's subjects`, false},
		{"cancel: not an id", []string{"cancel", "a.b"}, "invalid_request", `"a.b" is not a valid run id`, false},
		{"confirm answer: not an id", []string{"confirm", "answer", "a/b", "proceed"}, "invalid_request", `"a/b" is not a valid confirmation id`, false},
		{"cancel: unknown run", []string{"cancel", "nosuch"}, "not_found", `no run "nosuch"`, false},
		{"run: no such file", []string{"run", filepath.Join(dir, "nope.yaml")}, "invalid_request", "no such file or directory", false},
		{"run: missing input", []string{"run", "../../skills/release_prod.yaml"}, "invalid_request", `skill release_prod: missing required input "commit_sha"`, false},
		{"confirm answer --remember bogus", []string{"confirm", "answer", "c1", "proceed", "--remember", "bogus"}, "invalid_request", `at /remember: value must be one of`, false},
		{"desktop: a routing file with a misspelt key", []string{"desktop", "--routes", badRoutes}, "invalid_request", "field skill not found", false},
		{"chat: no such config", []string{"chat", filepath.Join(dir, "nope.yaml")}, "invalid_request", "chat config: open", false},
		{"chat: nobody mapped", []string{"chat", noUsers}, "invalid_request", "users is empty", false},
		{"chat: the token's variable unset", []string{"chat", noSecret}, "invalid_request", "slack token: $HEED_TEST_UNSET_TOKEN is empty or unset", false},
		{"changes confirm: not an id", []string{"changes", "confirm", "a.b", "1"}, "invalid_request", `"a.b" is not a valid change set id`, false},
		{"changes reject: item 11", []string{"changes", "reject", "cs-x", "11"}, "invalid_request", `item "11": use the item's number, 1 to 10`, false},
		{"changes confirm: no items, no --all", []string{"changes", "confirm", "cs-x"}, "invalid_request", "name the items by number", false},
		{"changes defer --all", []string{"changes", "defer", "cs-x", "--all"}, "invalid_request", "unknown flag: --all", true},
		{"changes propose: an argument its tool needs left out", []string{"changes", "propose", "--agent", "agent:a", "--subject", "t1", "--calls", noTask}, "invalid_request", "call 1 (set_task_title): tool set_task_title args[1]: {{ args.task }} has no value", false},
		{"changes show: unknown set", []string{"changes", "show", "cs-nosuch"}, "not_found", `no change set "cs-nosuch"`, false},
		{"changes list --after that no list gave", []string{"changes", "list", "--after", "page-2"}, "invalid_request", "after", false},
		{"changes propose: an immediate tool", []string{"changes", "propose", "--agent", "agent:a", "--subject", "t1", "--calls", immediate}, "invalid_request", "call 1 (read_task): an immediate tool is not reviewed", false},
		{"changes propose: not a list of calls", []string{"changes", "propose", "--agent", "agent:a", "--subject", "t1", "--calls", notCalls}, "invalid_request", "a JSON array of", false},
		{"console: no users file", []string{"console"}, "invalid_request", "--users: the console needs a users file", false},
		{"console: a user nobody can sign in as", []string{"console", "--users", noHash}, "invalid_request", "user user:alice has neither password_bcrypt nor token_sha256", false},
		{"up --console-listen without users", []string{"up", "--data", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0"}, "invalid_request", "--console-users: the console needs a users file", false},
		{"mcp --listen without tokens", []string{"mcp", "--listen", "127.0.0.1:0"}, "invalid_request", "--listen needs --tokens", false},
		{"deploy permissions without --out", []string{"deploy", "permissions"}, "invalid_request", "--out DIR is required", false},
		{"deploy permissions: an unknown role", []string{"deploy", "permissions", "--out", filepath.Join(dir, "secrets"), "--user", "bob:admin"}, "invalid_request", `no role "admin" (roles: service, agent, bridge, console, ops)`, false},
		{"deploy permissions: no role", []string{"deploy", "permissions", "--out", filepath.Join(dir, "secrets"), "--user", "bob"}, "invalid_request", "write NAME:ROLE", false},
		{"deploy permissions: a name twice", []string{"deploy", "permissions", "--out", filepath.Join(dir, "secrets"), "--user", "a:agent", "--user", "a:ops"}, "invalid_request", "a is named twice", false},
		{"deploy permissions: a path as a name", []string{"deploy", "permissions", "--out", filepath.Join(dir, "secrets"), "--user", "../x:agent"}, "invalid_request", "a name is lower-case letters", false},
		{"--nats-creds of a file that is not there", []string{"runs", "--nats-creds", filepath.Join(dir, "nope.creds")}, "invalid_request", "--nats-creds " + filepath.Join(dir, "nope.creds") + ": no such file", false},
		{"--nats-cert without --nats-key", []string{"runs", "--nats-cert", badSkill}, "invalid_request", "mutual TLS needs both --nats-cert and --nats-key", false},
		{"--log-format xml", []string{"runs", "--log-format", "xml"}, "invalid_request", `--log-format "xml": use text or json`, false},
		{"unknown command", []string{"fixs"}, "invalid_request", `unknown command "fixs" for "heed" (did you mean "fixes"?)`, true},
		{"unknown subcommand", []string{"fixes", "teach"}, "invalid_request", `unknown command "teach" for "heed fixes"`, true},
		{"unknown help topic", []string{"help", "fixs"}, "invalid_request", `unknown help topic "fixs" (did you mean "fixes"?)`, true},
		{"unknown completion shell", []string{"completion", "tcsh"}, "invalid_request", `unknown command "tcsh" for "heed completion"`, true},
		{"unknown flag", []string{"runs", "--bogus"}, "invalid_request", "unknown flag: --bogus", true},
		{"wrong argument count", []string{"audit"}, "invalid_request", "accepts 1 arg(s), received 0 (usage: heed audit", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, append([]string{"--nats-url", h.url}, c.args...)...)
			if code != exitUsage {
				t.Fatalf("heed %s: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), code, out, errOut)
			}
			if c.code == "" { // skill lint reports on stdout, file:line per problem
				if !strings.Contains(out, `bad.yaml:3:5: step "check": unknown tool "quay_chek" (not in the running heed's tools, ../../skills/tools.yaml) (did you mean "quay_check"?)`) {
					t.Errorf("skill lint:\nstdout:\n%s\nstderr:\n%s", out, errOut)
				}
				return
			}
			lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
			m := errLine.FindStringSubmatch(lines[0])
			if m == nil || m[1] != c.code || !strings.Contains(m[2], c.want) {
				t.Errorf("stderr:\n%s\nwant one line 'heed: %s: …%s…'", errOut, c.code, c.want)
			}
			if m != nil && strings.Contains(m[2], m[1]+": ") {
				t.Errorf("the code is said twice: %s", lines[0])
			}
			wantLines := 1
			if c.usage {
				wantLines = 2
				if len(lines) < 2 || !regexp.MustCompile(`^Run 'heed( [a-z]+)* --help' for usage\.$`).MatchString(lines[1]) {
					t.Errorf("a usage mistake without a hint:\n%s", errOut)
				}
			}
			if len(lines) != wantLines {
				t.Errorf("stderr has %d lines, want %d:\n%s", len(lines), wantLines, errOut)
			}
		})
	}
	// Nothing of it was recorded: no fix was learned, no change set proposed.
	if out, errOut, code := runCLI(t, "--nats-url", h.url, "changes", "list", "--all"); code != 0 || !strings.Contains(out, "(no change sets)") {
		t.Errorf("heed changes list after refused proposals: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, "--nats-url", h.url, "fixes", "list"); code != 0 || !strings.Contains(out, "(no learned fixes)") {
		t.Errorf("heed fixes list after refused fixes: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// Ctrl-C while heed run follows a run exits 130 and says the run goes on.
func TestRunInterruptedExits130(t *testing.T) {
	t.Parallel()
	h := startHeedWithTools(t)
	p := startProc(t, "heed run", "--nats-url", h.url, "run", "../../skills/release_prod.yaml", "-i", "commit_sha="+testSHA)
	p.waitOutput("waiting for an answer", 30*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("heed run still running 10s after SIGINT")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(p.stderr.String(), "goes on") {
		t.Errorf("heed run after SIGINT: exit %d, stderr:\n%s\nwant 130 and a line saying the run goes on", code, p.stderr.String())
	}
}
