package doctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sample = "# Title\n\n" +
	"```sh\nheed runs\nheed replay   # DIFFERENT; exit 1\n# a comment\nheed fixes learn --tool t \\\n  --set 'a=#b'   # exit 2\nnats req x '{}'\n# → {\"ok\":true,…}\n#   second line\n```\n\n" +
	"<!-- doc-test: skip (starts heed in the foreground) -->\n\n```sh\nheed up\n```\n\n" +
	"<!-- doc-test: file a.yaml -->\n```yaml\na: 1\n```\n\n" +
	"```console\n$ heed version\nheed 1.0 …\n$ heed x\n```\n\n" +
	"<!-- doc-test: usage -->\n```sh\nheed run FILE [--yes]\n```\n"

func TestParse(t *testing.T) {
	blocks, err := Parse("x.md", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 5 {
		t.Fatalf("%d blocks, want 5", len(blocks))
	}
	kinds := []Kind{Run, Skip, Other, Run, Usage}
	for i, b := range blocks {
		if b.Kind != kinds[i] {
			t.Errorf("block %d (line %d) kind %d, want %d", i, b.Line, b.Kind, kinds[i])
		}
	}
	if blocks[2].WriteTo != "a.yaml" || blocks[2].Body != "a: 1" {
		t.Errorf("file block %+v", blocks[2])
	}
	if r := blocks[1].Reason; r != "starts heed in the foreground" {
		t.Errorf("skip reason %q", r)
	}
	cmds := blocks[0].Commands
	if len(cmds) != 4 {
		t.Fatalf("%d commands in the first block, want 4: %+v", len(cmds), cmds)
	}
	if cmds[1].Exit != 1 || cmds[0].Exit != 0 {
		t.Errorf("exit statuses %d %d, want 0 1", cmds[0].Exit, cmds[1].Exit)
	}
	if cmds[2].Exit != 2 || !strings.Contains(cmds[2].Text, "\n  --set") || cmds[2].Line != 7 {
		t.Errorf("continued command %+v", cmds[2])
	}
	if want := "{\"ok\":true,…}\nsecond line"; cmds[3].Want != want {
		t.Errorf("shown output %q, want %q", cmds[3].Want, want)
	}
	con := blocks[3].Commands
	if len(con) != 2 || con[0].Want != "heed 1.0 …" || !con[0].Console || con[1].Want != "" {
		t.Errorf("console commands %+v", con)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, src := range map[string]string{
		"no language":          "```\nheed runs\n```\n",
		"skip without reason":  "<!-- doc-test: skip -->\n```sh\nheed up\n```\n",
		"unknown marker":       "<!-- doc-test: later -->\n```sh\nheed up\n```\n",
		"marker before yaml":   "<!-- doc-test: skip (x) -->\n```yaml\na: 1\n```\n",
		"file before sh":       "<!-- doc-test: file x.sh -->\n```sh\nheed up\n```\n",
		"file with a path":     "<!-- doc-test: file ../x.yaml -->\n```yaml\na: 1\n```\n",
		"marker without block": "<!-- doc-test: skip (x) -->\ntext\n```sh\nheed up\n```\n",
		"unterminated":         "```sh\nheed runs\n",
		"empty block":          "```sh\n# only a comment\n```\n",
		"console output first": "```console\noutput\n$ heed runs\n```\n",
	} {
		if _, err := Parse("x.md", []byte(src)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		want, got string
		ok        bool
	}{
		{"{\"run_id\":\"…\",\"status\":\"requested\"}", "{\"run_id\":\"01m8x\",\"status\":\"requested\"}\n", true},
		{"{\"run_id\":\"…\",\"status\":\"requested\"}", "{\"run_id\":\"01m8x\",\"status\":\"failed\"}", false},
		{"a  b\nc …", "  a b\nc d\ne", true},
		{"a", "a\nb", false},
		{"x.y", "xzy", false},
		{"run 01m84rhk63z7fw8y6f8rxvn1e9 started at 2026-11-23 17:51:30, in 103.696ms", "run 01m84rkwetzjtsxtm13sjvwf6q started at 2026-11-24 09:01:02, in 7.1s", true},
		{"run 01m84rhk63z7fw8y6f8rxvn1e9 completed", "run 01m84rkwetzjtsxtm13sjvwf6q failed", false},
	} {
		if got := Match(c.want, c.got); got != c.ok {
			t.Errorf("Match(%q, %q) = %v, want %v", c.want, c.got, got, c.ok)
		}
	}
}

// TestScript runs a written script: variables carry over, each command's
// output and status are kept, and stdin is empty.
func TestScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	blocks, err := Parse("x.md", []byte("```sh\nX=hello\necho $X world\ncat; false  # exit 1\necho <name> >&2\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := Script(blocks[0].Commands, Hooks{
		Rewrite: func(s string) string { return strings.ReplaceAll(s, "<name>", "$X") },
		Prelude: "seen() { echo \"$1\" >>\"$__d/seen\"; }",
		After:   `case "$__cmd" in *world*) grep -q hello "$__out" && seen "$__rc";; esac`,
		Limit:   30 * time.Second,
	})
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "DOCTEST_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for name, want := range map[string]string{"1.out": "hello world", "1.rc": "0", "2.rc": "1", "2.out": "", "3.err": "hello", "started": "done", "seen": "0"} {
		if got := read(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestInline(t *testing.T) {
	src := "Run `heed replay\n--apply` or `bin/heed runs`.\n```sh\nx `heed no` y\n```\nNot `heedless` nor `nats ls`; `heed audit <run>`.\n"
	got := Inline("x.md", []byte(src))
	var texts []string
	for _, c := range got {
		texts = append(texts, c.Text)
	}
	if want := "heed replay --apply|heed runs|nats ls|heed audit <run>"; strings.Join(texts, "|") != want {
		t.Fatalf("Inline = %q, want %q", strings.Join(texts, "|"), want)
	}
	if got[0].Line != 1 || got[3].Line != 6 {
		t.Errorf("lines %d, %d; want 1, 6", got[0].Line, got[2].Line)
	}
}

// TestScriptLimit: a command that hangs is stopped at the limit, marked,
// and the next command runs.
func TestScriptLimit(t *testing.T) {
	if _, err := exec.LookPath("pgrep"); err != nil {
		t.Skip("no pgrep")
	}
	blocks, err := Parse("x.md", []byte("```sh\nsleep 60\necho next\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", Script(blocks[0].Commands, Hooks{Limit: time.Second}))
	cmd.Env = append(os.Environ(), "DOCTEST_DIR="+dir)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %s", d)
	}
	if _, err := os.Stat(filepath.Join(dir, "0.timeout")); err != nil {
		t.Errorf("the hanging command is not marked: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "1.timeout")); err == nil {
		t.Error("the quick command is marked")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "1.out")); strings.TrimSpace(string(b)) != "next" {
		t.Errorf("the next command printed %q", b)
	}
}
