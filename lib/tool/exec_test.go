package tool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/tool"
)

// TestMain turns the test binary into the programs exec tools run, chosen by
// an environment variable the tool's set_env provides (with GORACE's exit
// pause off: a race-enabled binary otherwise sleeps a second on exit):
//
//	HEED_ARGV_HELPER=1   print os.Args[1:] as JSON
//	HEED_ENV_HELPER=1    print the environment and stdin as JSON
//	HEED_FAIL_HELPER=1   print {"partial":true}, write args[0] to stderr, exit args[1]
//	HEED_OUT_HELPER=1    print args[0] verbatim
//	HEED_SLEEP_HELPER=1  start a child in its process group, write both pids
//	                     to args[1], then sleep args[0]
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("HEED_ARGV_HELPER") == "1":
		b, _ := json.Marshal(os.Args[1:])
		os.Stdout.Write(b)
		os.Exit(0)
	case os.Getenv("HEED_ENV_HELPER") == "1":
		in, _ := io.ReadAll(os.Stdin)
		b, _ := json.Marshal(map[string]any{"env": os.Environ(), "stdin": string(in)})
		os.Stdout.Write(b)
		os.Exit(0)
	case os.Getenv("HEED_FAIL_HELPER") == "1":
		fmt.Println(`{"partial":true}`)
		fmt.Fprintln(os.Stderr, os.Args[1])
		code, _ := strconv.Atoi(os.Args[2])
		os.Exit(code)
	case os.Getenv("HEED_OUT_HELPER") == "1":
		fmt.Print(os.Args[1])
		os.Exit(0)
	case os.Getenv("HEED_SLEEP_HELPER") == "1":
		d, _ := time.ParseDuration(os.Args[1])
		pids := []int{os.Getpid()}
		if len(os.Args) > 2 {
			child := exec.Command(os.Args[0], os.Args[1]) // same group: the tool's
			child.Env = os.Environ()
			child.Stdout = os.Stdout // holds the tool's stdout open too
			if err := child.Start(); err == nil {
				pids = append(pids, child.Process.Pid)
			}
			b, _ := json.Marshal(pids)
			_ = os.WriteFile(os.Args[2], b, 0o644)
		}
		time.Sleep(d)
		fmt.Println(`{"ok":true}`)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// self is the test binary: the program every exec tool here runs.
func self(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// registry writes a tools file into a temporary directory and loads it.
func registry(t testing.TB, yaml string) *tool.Registry {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tools.yaml")
	yaml = strings.ReplaceAll(yaml, "SELF", strconv.Quote(self(t)))
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := tool.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func invoke(t testing.TB, reg *tool.Registry, name string, args map[string]any) tool.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inv := &tool.Invoker{Registry: reg}
	return inv.Invoke(ctx, tool.Call{Tool: name, Args: args, RunID: "run1", Step: "s", Attempt: 2, IdempotencyKey: tool.IdempotencyKey("run1", 4, 2)})
}

// TestExecArgvIsLiteral: whatever a value holds, it reaches the program as
// exactly one argv element; no shell ever sees it.
func TestExecArgvIsLiteral(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	_, pwnedBefore := os.Stat("/tmp/pwned")
	reg := registry(t, `
tools:
  argv:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_ARGV_HELPER: "1"}
    args: ["{{ args.value }}", "fixed"]
  argv_more:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_ARGV_HELPER: "1"}
    args: ["--n={{ args.n }}", "{{ args.n }}", "{{ args.obj }}", "{{ run.idempotency_key }}", "{{ args.missing ?? \"\" }}"]
  argv_needs:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_ARGV_HELPER: "1"}
    args: ["--task", "{{ args.task }}"]
`)
	values := []string{
		"; rm -rf /",
		"$(touch /tmp/pwned)",
		"$(touch " + marker + ")",
		"`touch " + marker + "`",
		"two words  and\ttabs",
		"line one\nline two\n",
		`"double" 'single' \"escaped\"`,
		"a; rm -rf / && $(touch /tmp/pwned) | `touch " + marker + "` > /tmp/x 'q' \"q\"\n* $HOME ${PATH}",
		"",
		"-rf",
		"{{ args.value }}",
	}
	for _, v := range values {
		res := invoke(t, reg, "argv", map[string]any{"value": v})
		if res.Err != nil {
			t.Fatalf("value %q: %v (%s)", v, res.Err, res.Err.Kind)
		}
		var got []string
		if err := json.Unmarshal([]byte(fmt.Sprint(jsonText(t, res.Output))), &got); err != nil {
			t.Fatalf("value %q: output %#v: %v", v, res.Output, err)
		}
		if want := []string{v, "fixed"}; !reflect.DeepEqual(got, want) {
			t.Errorf("argv = %q, want %q", got, want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("%s was created: a value ran as a command", marker)
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil && pwnedBefore != nil {
		t.Errorf("/tmp/pwned was created: a value ran as a command")
	}

	res := invoke(t, reg, "argv_more", map[string]any{"n": 3, "obj": map[string]any{"k": "v w"}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var got []string
	if err := json.Unmarshal([]byte(jsonText(t, res.Output)), &got); err != nil {
		t.Fatal(err)
	}
	want := []string{"--n=3", "3", `{"k":"v w"}`, "run1/4/2", ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("argv = %q, want %q", got, want)
	}

	// An argument the call left out is an error, not an empty word: the
	// tool does not run.
	res = invoke(t, reg, "argv_needs", map[string]any{"title": "Fix login bug"})
	if res.Err == nil || res.Err.Kind != "template" || !strings.Contains(res.Err.Message, "tool argv_needs args[1]: {{ args.task }} has no value") {
		t.Errorf("a call without args.task: %v (output %v)", res.Err, res.Output)
	}
	spec, _ := reg.Get("argv_needs")
	if err := spec.CheckArgs(map[string]any{"title": "x"}); err == nil {
		t.Error("CheckArgs passes a call without args.task")
	}
	if err := spec.CheckArgs(map[string]any{"task": "t1"}); err != nil {
		t.Errorf("CheckArgs of a whole call: %v", err)
	}
}

// jsonText re-encodes structured output to JSON text.
func jsonText(t testing.TB, v any) string {
	t.Helper()
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestExecNonZeroExit(t *testing.T) {
	reg := registry(t, `
tools:
  fail:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_FAIL_HELPER: "1"}
    args: ["{{ args.msg }}", "{{ args.code }}"]
`)
	res := invoke(t, reg, "fail", map[string]any{"msg": "manifest unknown: quay.io/x:abc", "code": 7})
	if res.Err == nil {
		t.Fatalf("no error; output %#v", res.Output)
	}
	if res.Err.Kind != "exit" || res.Err.Message != "manifest unknown: quay.io/x:abc" {
		t.Errorf("error = %+v", res.Err)
	}
	if res.Err.ExitCode == nil || *res.Err.ExitCode != 7 {
		t.Errorf("exit code = %v, want 7", res.Err.ExitCode)
	}
	if out, ok := res.Output.(map[string]any); !ok || out["partial"] != true {
		t.Errorf("stdout of a failed tool = %#v, want {partial: true}", res.Output)
	}
	if res.Duration <= 0 {
		t.Errorf("duration %s", res.Duration)
	}
	// Without stderr, stdout is the message.
	res = invoke(t, reg, "fail", map[string]any{"msg": "", "code": 1})
	if res.Err == nil || res.Err.Message != `{"partial":true}` || *res.Err.ExitCode != 1 {
		t.Errorf("error = %+v", res.Err)
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// waiting for its parent counts as exited).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func readPids(t testing.TB, file string) []int {
	t.Helper()
	var pids []int
	eventually(t, 10*time.Second, func() error {
		pids = nil
		b, err := os.ReadFile(file)
		if err == nil && json.Unmarshal(b, &pids) == nil && len(pids) == 2 {
			return nil
		}
		return fmt.Errorf("the tool has not written its two pids to %s", file)
	})
	return pids
}

// TestExecTimeoutKillsTheGroup: a tool past its timeout is killed with
// every process it started, and the result says timeout.
func TestExecTimeoutKillsTheGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	reg := registry(t, `
tools:
  slow:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_SLEEP_HELPER: "1"}
    args: ["30s", "{{ args.pids }}"]
    timeout: 4s
`)
	// 4 s: the helper (this race-built test binary) must have started its
	// child and written both pids before it is killed, on a loaded machine.
	start := time.Now()
	res := invoke(t, reg, "slow", map[string]any{"pids": pidFile})
	took := time.Since(start)
	if res.Err == nil || res.Err.Kind != "timeout" || !strings.Contains(res.Err.Message, "timed out after 4s") {
		t.Fatalf("result = %+v %+v", res.Err, res.Output)
	}
	if took > 12*time.Second {
		t.Errorf("a 4s timeout took %s", took)
	}
	pids := readPids(t, pidFile)
	eventually(t, 5*time.Second, func() error {
		for _, pid := range pids {
			if alive(pid) {
				return fmt.Errorf("process %d of the timed-out tool is still running", pid)
			}
		}
		return nil
	})
}

// TestExecCancel: cancelling the call's context stops the tool at once.
func TestExecCancel(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	reg := registry(t, `
tools:
  slow:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_SLEEP_HELPER: "1"}
    args: ["30s", "{{ args.pids }}"]
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan tool.Result, 1)
	go func() {
		done <- (&tool.Invoker{Registry: reg}).Invoke(ctx, tool.Call{Tool: "slow", Args: map[string]any{"pids": pidFile}, RunID: "r", IdempotencyKey: "r/0/1"})
	}()
	pids := readPids(t, pidFile)
	cancel()
	select {
	case res := <-done:
		if res.Err == nil || res.Err.Kind != "cancelled" {
			t.Errorf("result = %+v", res.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled tool call did not return")
	}
	eventually(t, 5*time.Second, func() error {
		for _, pid := range pids {
			if alive(pid) {
				return fmt.Errorf("process %d of the cancelled tool is still running", pid)
			}
		}
		return nil
	})
}

func eventually(t testing.TB, total time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecOutput(t *testing.T) {
	reg := registry(t, `
tools:
  out:
    command: SELF
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_OUT_HELPER: "1"}
    args: ["{{ args.text }}"]
    max_output_bytes: 64
`)
	cases := []struct {
		text string
		want any
	}{
		{`{"a": 1, "b": [true, "x"], "c": null}`, map[string]any{"a": json.Number("1"), "b": []any{true, "x"}, "c": nil}},
		{"  [1, 2]\n", []any{json.Number("1"), json.Number("2")}},
		{`"quoted"`, "quoted"},
		{"plain text\n", "plain text"},
		{`{"a": 1} trailing`, `{"a": 1} trailing`},
		{`{"broken": `, `{"broken":`},
		{"", nil},
		{strings.Repeat("y", 100), strings.Repeat("y", 64)},
	}
	for _, tc := range cases {
		res := invoke(t, reg, "out", map[string]any{"text": tc.text})
		if res.Err != nil {
			t.Fatalf("%q: %v", tc.text, res.Err)
		}
		if !reflect.DeepEqual(res.Output, tc.want) {
			t.Errorf("stdout %q became %#v, want %#v", tc.text, res.Output, tc.want)
		}
	}
}

// TestExecEnvironment: only allowlisted variables reach a tool, plus what
// heed tells it (idempotency key first of all); the args arrive on stdin.
func TestExecEnvironment(t *testing.T) {
	t.Setenv("HEED_TEST_VISIBLE", "yes")
	t.Setenv("HEED_TEST_HIDDEN", "secret")
	reg := registry(t, `
tools:
  env:
    command: SELF
    env: [HEED_TEST_VISIBLE, HEED_TEST_UNSET]
    set_env: {GORACE: "atexit_sleep_ms=0", HEED_ENV_HELPER: "1", FIXED: "v a l"}
`)
	args := map[string]any{"a": "b", "n": 1}
	res := invoke(t, reg, "env", args)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var got struct {
		Env   []string `json:"env"`
		Stdin string   `json:"stdin"`
	}
	if err := json.Unmarshal([]byte(jsonText(t, res.Output)), &got); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range got.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{
		"HEED_TEST_VISIBLE":    "yes",
		"FIXED":                "v a l",
		"HEED_TOOL":            "env",
		"HEED_RUN_ID":          "run1",
		"HEED_STEP":            "s",
		"HEED_ATTEMPT":         "2",
		"HEED_IDEMPOTENCY_KEY": "run1/4/2",
		"HEED_ARGS":            `{"a":"b","n":1}`,
		"PATH":                 os.Getenv("PATH"),
		"GORACE":               "atexit_sleep_ms=0",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"HEED_TEST_HIDDEN", "HEED_TEST_UNSET", "HOME", "GOFLAGS", "USER"} {
		if v, ok := env[k]; ok {
			t.Errorf("%s=%q reached the tool; it is not in env:", k, v)
		}
	}
	if len(env) != len(want)+1 { // + HEED_ENV_HELPER
		t.Errorf("the tool saw %d variables, want %d: %v", len(env), len(want)+1, got.Env)
	}
	if got.Stdin != `{"a":"b","n":1}` {
		t.Errorf("stdin = %q", got.Stdin)
	}
}

func TestExecNotFound(t *testing.T) {
	reg := registry(t, `
tools:
  gone:
    command: ./no/such/program
  gone_path:
    command: heed-no-such-program-in-path
`)
	for _, name := range []string{"gone", "gone_path", "not_in_file"} {
		res := invoke(t, reg, name, nil)
		if res.Err == nil || res.Err.Kind != "not_found" {
			t.Errorf("%s: %+v", name, res.Err)
		}
	}
	spec, _ := reg.Get("gone")
	if spec.TimeoutDuration() != tool.DefaultTimeout {
		t.Errorf("default timeout %s", spec.TimeoutDuration())
	}
}

func TestLoadToolsFile(t *testing.T) {
	reg, err := tool.LoadFile("../../skills/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Join(reg.Names(), " ") + " "
	for _, want := range []string{"create_release_mr", "git_delete_branch", "git_merged_branches", "kube_get_deployment", "kube_scale", "quay_check"} {
		if !strings.Contains(names, want+" ") {
			t.Errorf("tools %s: no %s", names, want)
		}
	}
	q, _ := reg.Get("quay_check")
	if q.Kind != tool.KindExec || q.TimeoutDuration() != 10*time.Second {
		t.Errorf("quay_check = %+v", q)
	}
	// A relative command resolves against the tools file's directory.
	res := invoke(t, reg, "quay_check", map[string]any{"tag": "short"})
	if res.Err == nil || res.Err.Kind != "exit" || res.Err.Message != "manifest unknown: quay.io/app-sre/backend:short" {
		t.Errorf("quay_check short tag: %+v", res.Err)
	}

	bad := []struct{ yaml, want string }{
		{"tools:\n  x: {kind: grpc, command: a}\n", `tool x: kind "grpc": use exec or nats`},
		{"tools:\n  x: {kind: exec}\n", "tool x: exec tool needs a command"},
		{"tools:\n  x: {kind: nats, command: a}\n", "tool x: a nats tool has no command or args"},
		{"tools:\n  x: {command: a, timeout: soon}\n", `tool x: timeout "soon" is not a positive duration`},
		{"tools:\n  x: {command: a, args: [\"{{ inputs.x }}\"]}\n", "tool x: args[0]"},
		{"tools:\n  x: {command: a, argz: []}\n", "field argz not found"},
		{"tools:\n  x:\n", "tool x: empty definition"},
		{"tools:\n  bad.name: {command: a}\n", "tool bad.name: name"},
		{"tools:\n  x: {command: a, review: later}\n", `tool x: review "later": use immediate or deferred`},
		{"tools:\n  x: {command: a, summary: \"{{ inputs.x }}\"}\n", "tool x: summary"},
		{"tools:\n  x: {command: a, check: nope}\n", `tool x: check: "nope" is not another tool of this file`},
		{"tools:\n  x: {command: a, explode: {field: items, tool: y}}\n  y: {command: a}\n", "tool x: explode: only a deferred tool is exploded"},
		{"tools:\n  x: {command: a, review: deferred, explode: {tool: y}}\n  y: {command: a}\n", "tool x: explode: field names the list argument"},
		{"tools:\n  x: {command: a, review: deferred, explode: {field: items, tool: z}}\n", `tool x: explode: tool "z" is not another tool`},
	}
	for _, b := range bad {
		_, err := tool.Load("t.yaml", []byte(b.yaml))
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.HasPrefix(err.Error(), "t.yaml") {
			t.Errorf("%q: error %v, want one naming t.yaml and %q", b.yaml, err, b.want)
		}
	}
	nt, err := tool.Load("t.yaml", []byte("tools:\n  n: {kind: nats}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := nt.Get("n"); s.Subject != "heed.tool.n" {
		t.Errorf("default subject %q", s.Subject)
	}
}
