package main

// The docs are tested: every shell command shown in README.md, docs/*.md,
// BENCHMARKS.md and examples/*/README.md runs against a real `heed up`,
// and the output the docs show is checked (tools/internal/doctest says how
// a document marks what it shows). A command block that cannot run in a
// test says so in the Markdown, with the reason, and is counted here.

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/tools/internal/doctest"
)

// repoRoot is the repository, seen from tools/heed.
const repoRoot = "../.."

// readOnlyNats are the nats commands of the prose the doc test runs: the
// ones that only read and end by themselves (not nats sub, nor stream
// view, which pages on a terminal and fails without one).
var readOnlyNats = regexp.MustCompile(`^nats (stream (ls|report|info)|kv (ls|get)|micro (ls|info)|consumer (ls|report|info)|server (ls|list|report))\b`)

// commandLimit is how long one documented command may run.
const commandLimit = 30 * time.Second

// docFiles lists the documents in the order a reader meets them: the
// README first (its run is the one later examples name), then docs/,
// BENCHMARKS.md and the examples' READMEs.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	examples, err := filepath.Glob(filepath.Join(repoRoot, "examples", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(examples)
	files = append(append([]string{filepath.Join(repoRoot, "README.md")}, files...), filepath.Join(repoRoot, "BENCHMARKS.md"))
	return append(files, examples...)
}

// parseDocs parses every document; a block that breaks the rules fails
// the test.
func parseDocs(t *testing.T) []doctest.Block {
	t.Helper()
	var all []doctest.Block
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		blocks, err := doctest.Parse(rel, src)
		if err != nil {
			t.Errorf("%v", err)
		}
		all = append(all, blocks...)
	}
	return all
}

// TestDocsBlocksAreMarked: every fenced block has a language, and every
// command block is run, checked as a synopsis, or skipped with a reason.
// It needs no server, so it also runs where the nats CLI is missing.
func TestDocsBlocksAreMarked(t *testing.T) {
	blocks := parseDocs(t)
	count := map[doctest.Kind]int{}
	for _, b := range blocks {
		count[b.Kind]++
		if b.Kind == doctest.Skip {
			t.Logf("skipped: %s:%d (%s)", b.File, b.Line, b.Reason)
		}
	}
	t.Logf("%d blocks: %d run, %d synopses checked, %d skipped with a reason, %d not commands",
		len(blocks), count[doctest.Run], count[doctest.Usage], count[doctest.Skip], count[doctest.Other])
	if count[doctest.Run] == 0 {
		t.Error("no command block is run")
	}
}

// TestDocsNameRealTests: every test, benchmark and fuzz target the docs
// name (`TestChaos`, `BenchmarkReadHistory`) exists in the repository.
func TestDocsNameRealTests(t *testing.T) {
	defined := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z]\w*)\(`)
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != repoRoot {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range funcRE.FindAllStringSubmatch(string(src), -1) {
				defined[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	nameRE := regexp.MustCompile("`((?:Test|Benchmark|Fuzz)[A-Z]\\w*)`")
	named := 0
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		for _, m := range nameRE.FindAllStringSubmatchIndex(string(src), -1) {
			name := string(src[m[2]:m[3]])
			named++
			if !defined[name] {
				t.Errorf("%s:%d: names %s, which no _test.go file defines", rel, 1+strings.Count(string(src[:m[0]]), "\n"), name)
			}
		}
	}
	t.Logf("%d names of tests in the docs, %d tests in the repository", named, len(defined))
}

// TestDocsPathsExist: the repository paths the docs name in code spans
// (`services/runner/decide.go`, `tools/ci/deps.sh`) and the targets of
// their relative links exist.
func TestDocsPathsExist(t *testing.T) {
	tops := map[string]bool{}
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// bin/ and artifacts/ are build and test outputs (ignored by
		// git): whether they exist depends on what ran before, and
		// artifacts/ is made by whichever of the console and desktop
		// tests, which run in parallel with this one, comes first.
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "bin" && e.Name() != "artifacts" {
			tops[e.Name()] = true
		}
	}
	spanRE := regexp.MustCompile("`([a-z][\\w.-]*/[\\w./-]*)`")
	linkRE := regexp.MustCompile(`\]\(([^)#:\s]+)(#[^)]*)?\)`)
	checked := 0
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		line := func(off int) int { return 1 + strings.Count(string(src[:off]), "\n") }
		for _, m := range spanRE.FindAllSubmatchIndex(src, -1) {
			p := strings.TrimSuffix(string(src[m[2]:m[3]]), "/")
			if !tops[strings.Split(p, "/")[0]] {
				continue // not a repository path (a subject, a URL part…)
			}
			checked++
			if !fileExists(filepath.Join(repoRoot, p)) {
				t.Errorf("%s:%d: names %s, which does not exist", rel, line(m[0]), p)
			}
		}
		for _, m := range linkRE.FindAllSubmatchIndex(src, -1) {
			target := string(src[m[2]:m[3]])
			checked++
			if !fileExists(filepath.Join(filepath.Dir(f), target)) {
				t.Errorf("%s:%d: links to %s, which does not exist", rel, line(m[0]), target)
			}
		}
	}
	t.Logf("%d paths and links checked", checked)
}

// goPackages are heed's packages the docs name identifiers of, by the
// name the docs use (`events.Provision`).
var goPackages = map[string]string{
	"events": "events", "readmodel": "events/readmodel", "command": "events/command",
	"confirmation": "lib/confirmation", "runstate": "lib/runstate", "skill": "lib/skill",
	"tool": "lib/tool", "service": "lib/service", "embedded": "lib/embedded",
	"eventstest": "lib/eventstest", "client": "client", "changeset": "lib/changeset",
}

// TestDocsNameRealIdentifiers: every identifier of a heed package the docs
// name (`events.ReadHistory`, `events.Bus.Publish`) is declared there.
func TestDocsNameRealIdentifiers(t *testing.T) {
	declared := map[string]map[string]bool{}
	for name, dir := range goPackages {
		decl := map[string]bool{}
		files, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s: no Go files in %s (%v)", name, dir, err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range file.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil {
						decl[d.Name.Name] = true
						continue
					}
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					if ix, ok := recv.(*ast.IndexExpr); ok {
						recv = ix.X
					}
					if id, ok := recv.(*ast.Ident); ok {
						decl[id.Name+"."+d.Name.Name] = true
					}
					// The docs may name a method by its package alone
					// (`client.History` for (*client.Client).History).
					decl["*."+d.Name.Name] = true
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch sp := spec.(type) {
						case *ast.TypeSpec:
							decl[sp.Name.Name] = true
						case *ast.ValueSpec:
							for _, n := range sp.Names {
								decl[n.Name] = true
							}
						}
					}
				}
			}
		}
		declared[name] = decl
	}
	identRE := regexp.MustCompile("`([a-z]+)\\.([A-Z]\\w*(?:\\.[A-Z]\\w*)?)")
	checked := 0
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		for _, m := range identRE.FindAllSubmatchIndex(src, -1) {
			pkg, ident := string(src[m[2]:m[3]]), string(src[m[4]:m[5]])
			decl, ok := declared[pkg]
			if !ok {
				continue // not a heed package (jetstream.WithMsgID, url.URL)
			}
			checked++
			if !decl[ident] && !decl["*."+ident] {
				t.Errorf("%s:%d: names %s.%s, which package %s does not declare", rel, 1+strings.Count(string(src[:m[0]]), "\n"), pkg, ident, goPackages[pkg])
			}
		}
	}
	t.Logf("%d identifiers checked", checked)
}

// TestDocsFlagsExist: every flag the docs name on its own (`--sweep-every`)
// is a flag of some heed command or of the service binaries (lib/service,
// services/*/cmd).
func TestDocsFlagsExist(t *testing.T) {
	known := map[string]bool{}
	flagRE := regexp.MustCompile(`(?:^|[\s,])(--[a-z][a-z-]*)`)
	var walk func(path []string)
	walk = func(path []string) {
		out := []byte(helpOf(t, path))
		for _, m := range flagRE.FindAllStringSubmatch(string(out), -1) {
			known[m[1]] = true
		}
		if i := strings.Index(string(out), "Available Commands:"); i >= 0 {
			for _, line := range strings.Split(string(out)[i:], "\n")[1:] {
				f := strings.Fields(line)
				if len(f) == 0 {
					break
				}
				if f[0] != "help" && f[0] != "completion" {
					walk(append(append([]string{}, path...), f[0]))
				}
			}
		}
	}
	walk(nil)
	var sources []string
	for _, g := range []string{"lib/service/*.go", "services/*/cmd/*/*.go"} {
		files, _ := filepath.Glob(filepath.Join(repoRoot, g))
		sources = append(sources, files...)
	}
	defRE := regexp.MustCompile(`\.(?:String|Bool|Int|Int64|Uint64|Duration|Float64|Var|StringVar|BoolVar|IntVar|Uint64Var|DurationVar)P?\((?:&[\w.]+,\s*)?"([a-z][a-z-]*)"`)
	for _, f := range sources {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range defRE.FindAllStringSubmatch(string(src), -1) {
			known["--"+m[1]] = true
		}
	}
	nameRE := regexp.MustCompile("`(--[a-z][a-z-]*)[` =]")
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		for _, m := range nameRE.FindAllSubmatchIndex(src, -1) {
			if flag := string(src[m[2]:m[3]]); !known[flag] {
				t.Errorf("%s:%d: names the flag %s, which no heed command nor service binary has", rel, 1+strings.Count(string(src[:m[0]]), "\n"), flag)
			}
		}
	}
	t.Logf("%d flags known", len(known))
}

// TestDocsUsage: every heed command the docs name without running it —
// the lines of a synopsis block (<!-- doc-test: usage -->) and the
// commands in code spans of the prose, such as `heed replay --apply` —
// names a command that exists, with flags it has and, where it lists a
// flag's choices (--status a|b), choices the command offers.
func TestDocsUsage(t *testing.T) {
	var cmds []doctest.Command
	for _, b := range parseDocs(t) {
		if b.Kind == doctest.Usage {
			cmds = append(cmds, b.Commands...)
		}
	}
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		for _, c := range doctest.Inline(rel, src) {
			if strings.HasPrefix(c.Text, "heed ") {
				cmds = append(cmds, c)
			}
		}
	}
	help := func(path []string) string { return helpOf(t, path) }
	flagRE := regexp.MustCompile(`(?:^|[\s\[|(])(--?[a-zA-Z][a-z-]*)(?:[ =]([a-z_]+(?:\|[a-z_]+)+))?`)
	checked := 0
	for _, c := range cmds {
		words := strings.Fields(c.Text)
		if len(words) == 0 || words[0] != "heed" {
			t.Errorf("%s: not a heed command", c)
			continue
		}
		// The command path: the words that name subcommands.
		var path []string
		for _, w := range words[1:] {
			if !hasSubcommand(help(path), w) {
				break
			}
			path = append(path, w)
		}
		h := help(path)
		for _, m := range flagRE.FindAllStringSubmatch(c.Text, -1) {
			flag := m[1]
			if !regexp.MustCompile(`(^|[\s,])` + regexp.QuoteMeta(flag) + `\b`).MatchString(h) {
				t.Errorf("%s: heed %s has no flag %s", c, strings.Join(path, " "), flag)
				continue
			}
			for _, choice := range strings.Split(m[2], "|") {
				if choice != "" && !strings.Contains(h, choice) {
					t.Errorf("%s: heed %s %s does not offer %q", c, strings.Join(path, " "), flag, choice)
				}
			}
		}
		checked++
	}
	t.Logf("%d commands named in the docs checked against heed --help", checked)
}

// hasSubcommand reports whether a command's help lists name among its
// available commands.
func hasSubcommand(help, name string) bool {
	i := strings.Index(help, "Available Commands:")
	if i < 0 {
		return false
	}
	for _, line := range strings.Split(help[i:], "\n")[1:] {
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		if f[0] == name {
			return true
		}
	}
	return false
}

// TestDocsCommands runs every command block of the docs, in order, in one
// shell, against a `heed up` started as README.md says (data in .heed,
// the example tools), on a free port, with HEED_NATS_URL set and a nats
// context selected as docs/OPERATIONS.md says. The shell's working
// directory is like a clone after `make build`: bin/heed, skills/,
// examples/ and deploy/ (the repository's own, read only by the docs).
func TestDocsCommands(t *testing.T) {
	blocks := parseDocs(t)
	if t.Failed() {
		t.FailNow()
	}
	natsCLI := findNatsCLI()
	if natsCLI == "" {
		t.Skip("the nats CLI is not installed: the docs show nats commands (tools/ci/deps.sh installs it; make test runs this)")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}

	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	root, _ := filepath.Abs(repoRoot)
	for _, err := range []error{
		os.Mkdir(bin, 0o755),
		os.Mkdir(filepath.Join(work, "home"), 0o755),
		os.Symlink(cliBin(t), filepath.Join(bin, "heed")),
		os.Symlink(natsCLI, filepath.Join(bin, "nats")),
		os.Symlink(filepath.Join(root, "skills"), filepath.Join(work, "skills")),
		os.Symlink(filepath.Join(root, "examples"), filepath.Join(work, "examples")),
		os.Symlink(filepath.Join(root, "deploy"), filepath.Join(work, "deploy")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	up := startProcIn(t, work, "heed up", "up", "--data", ".heed", "--nats-listen", addr, "--tools", "skills/tools.yaml")
	up.waitOutput("ready", 30*time.Second)

	var cmds []doctest.Command
	for _, b := range blocks {
		if b.Kind == doctest.Run {
			cmds = append(cmds, b.Commands...)
		}
		if b.WriteTo != "" {
			if fileExists(filepath.Join(work, b.WriteTo)) {
				t.Errorf("%s:%d: doc-test: file %s is written twice", b.File, b.Line, b.WriteTo)
			}
			if err := os.WriteFile(filepath.Join(work, b.WriteTo), []byte(b.Body+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Then the read-only nats commands the prose names (`nats micro ls`):
	// they run last, against everything the blocks made.
	inline := 0
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		for _, c := range doctest.Inline(rel, src) {
			if readOnlyNats.MatchString(c.Text) && !strings.ContainsAny(strings.ReplaceAll(c.Text, "<run-id>", ""), "<…") {
				cmds = append(cmds, c)
				inline++
			}
		}
	}
	t.Logf("%d read-only nats commands from the prose", inline)
	out := filepath.Join(work, "doctest")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	script := doctest.Script(cmds, doctest.Hooks{
		Rewrite: func(s string) string {
			return placeholderVars(strings.ReplaceAll(s, "127.0.0.1:4222", addr))
		},
		// The reader's setup: a nats context for heed's server.
		Prelude: "nats context save heed --server \"$HEED_NATS_URL\" --select >/dev/null || exit 1\n" +
			// __settle waits, as a reader would before typing the next
			// command, until a run that goes on without them (detached,
			// in the background, retried, continued) has stopped moving
			// (paused at a question, or ended): its line in heed runs
			// (status, step, events) is the same three times in a row,
			// 150 ms apart, and heed runs --status running (or
			// requested) does not list it.
			"__settle() { local i line last='' same=0; for i in $(seq 100); do line=$(heed runs | grep -F -- \"$DOCTEST_RUN_ID\"); " +
			"if [ -n \"$line\" ] && [ \"$line\" = \"$last\" ] && ! heed runs --status running | grep -qF -- \"$DOCTEST_RUN_ID\" && ! heed runs --status requested | grep -qF -- \"$DOCTEST_RUN_ID\"; then same=$((same+1)); [ $same -ge 2 ] && return; else same=0; fi; last=$line; sleep 0.15; done; }\n" +
			"__waitfor() { local i; [ -n \"$2\" ] || return; for i in $(seq 50); do $1 | grep -q -- \"$2\" && { sleep 0.2; return; }; sleep 0.1; done; }\n",
		// <run-id> in a later command is the run the last command that
		// started one (heed run, heed.cmd.run.start) named first; a heed
		// run left in the background (&) is given the time to print it
		// (and its question).
		After: "case \"$__cmd\" in *'heed run '*'&'*) for i in $(seq 100); do grep -qE '\\b01[0-9a-hjkmnp-tv-z]{24}\\b' \"$__out\" && break; sleep 0.1; done;; esac\n" +
			"case \"$__cmd\" in *'heed run '*|*heed.cmd.run.start*) __id=$(grep -oE '\\b01[0-9a-hjkmnp-tv-z]{24}\\b' \"$__out\" | head -n1); [ -n \"$__id\" ] && DOCTEST_RUN_ID=$__id;; esac\n" +
			"case \"$__cmd\" in *'heed run '*--detach*|*'heed run '*'&'*|*'heed retry '*|*'heed continue '*|*heed.cmd.run.*) __settle;; esac\n" +
			// What is taught (a fix, a remembered choice) reaches the
			// services through the learner's buckets: the next command
			// waits until heed shows it, as a reader who checks would.
			"case \"$__cmd\" in *'heed fixes learn '*) __f=$(grep -oE 'fix-[0-9a-f]{20}' \"$__out\" | head -n1); __waitfor \"heed fixes list\" \"$__f\";; esac\n" +
			"case \"$__cmd\" in *'heed confirm answer '*--remember*) __waitfor \"heed prefs list\" pref-;; esac\n" +
			// <confirm-id> is the last confirmation id a command printed
			// (a heed run in the background, once it has settled, too).
			"__id=$(grep -oE '\\b01[0-9a-hjkmnp-tv-z]{24}-[sl][0-9]+-a[0-9]+\\b' \"$__out\" | tail -n1); [ -n \"$__id\" ] && DOCTEST_CONFIRM_ID=$__id",
		Limit: commandLimit,
	})
	scriptPath := filepath.Join(work, "docs.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, scriptPath)
	cmd.Dir = work
	cmd.Env = append(childEnv(),
		"HOME="+filepath.Join(work, "home"),
		"XDG_CONFIG_HOME="+filepath.Join(work, "home", ".config"),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HEED_NATS_URL=nats://"+addr,
		"HEED_USER=doc-reader",
		"NO_COLOR=1",
		"DOCTEST_DIR="+out,
	)
	// Its own process group, so background commands (nats sub &) end with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	scriptOut, err := cmd.CombinedOutput()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	t.Logf("%d documented commands in %s", len(cmds), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Errorf("the doc script: %v\n%s", err, scriptOut)
	}
	checkNoDeadLetters(t, "nats://"+addr)
	read := func(name string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(out, name))
		return string(b), err == nil
	}
	if started, _ := read("started"); strings.TrimSpace(started) != "done" {
		if i, err := strconv.Atoi(strings.TrimSpace(started)); err == nil && i < len(cmds) {
			t.Errorf("%s: did not finish (the script was stopped after %s)", cmds[i], time.Since(start).Round(time.Second))
		}
	}
	for i, c := range cmds {
		if _, ok := read(fmt.Sprintf("%d.timeout", i)); ok {
			t.Errorf("%s\n  still running after %s, stopped: a command the docs show must end (mark a block that waits or follows with <!-- doc-test: skip (why) -->)", c, commandLimit)
			continue
		}
		rcs, ok := read(fmt.Sprintf("%d.rc", i))
		if !ok {
			break // reported above
		}
		stdout, _ := read(fmt.Sprintf("%d.out", i))
		stderr, _ := read(fmt.Sprintf("%d.err", i))
		rc, _ := strconv.Atoi(strings.TrimSpace(rcs))
		if rc != c.Exit {
			t.Errorf("%s\n  exit status %d, the docs say %d\n  stdout:\n%s\n  stderr:\n%s", c, rc, c.Exit, indent(stdout), indent(stderr))
			continue
		}
		if c.Want != "" && !doctest.Match(c.Want, stdout) {
			t.Errorf("%s\n  printed:\n%s\n  the docs show:\n%s\n  stderr:\n%s", c, indent(stdout), indent(c.Want), indent(stderr))
		}
	}
}

// checkNoDeadLetters fails the test when heed refused anything the docs'
// commands published: every event a doc shows must be a valid one.
func checkNoDeadLetters(t *testing.T, url string) {
	t.Helper()
	_, js := connect(t, url)
	ctx := ctxFor(t, 10*time.Second)
	s, err := js.Stream(ctx, events.DLQStream)
	if err != nil {
		t.Errorf("stream %s: %v", events.DLQStream, err)
		return
	}
	n := s.CachedInfo().State.Msgs
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq && n > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		t.Errorf("a documented command published what heed refused: %s: %s: %s", m.Header.Get("Heed-Dlq-Subject"), m.Header.Get("Heed-Dlq-Code"), m.Header.Get("Heed-Dlq-Reason"))
	}
}

// placeholders are what the docs write for an id a reader copies from an
// earlier command's output, and the shell variable the test keeps it in.
var placeholders = []struct{ text, variable string }{
	{"<run-id>", "DOCTEST_RUN_ID"},
	{"<confirm-id>", "DOCTEST_CONFIRM_ID"},
	{"<confirmation-id>", "DOCTEST_CONFIRM_ID"},
}

// placeholderVars replaces the placeholders with their shell variables;
// inside single quotes the quotes are closed around the variable
// ('…'"${DOCTEST_RUN_ID}"'…').
func placeholderVars(s string) string {
	var b strings.Builder
	single, double := false, false
next:
	for i := 0; i < len(s); i++ {
		for _, p := range placeholders {
			if strings.HasPrefix(s[i:], p.text) {
				if single {
					b.WriteString(`'"${` + p.variable + `}"'`)
				} else {
					b.WriteString("${" + p.variable + "}")
				}
				i += len(p.text) - 1
				continue next
			}
		}
		switch s[i] {
		case '\'':
			if !double {
				single = !single
			}
		case '"':
			if !single {
				double = !double
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// The docs' commands run a heed built without -race even when the tests
// are: they test the docs, not for races (heed up, which runs every
// service, still is the race-checked binary), and a -race build takes
// about a second to start, which made the doc test take minutes.
var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// cliBin returns the heed binary the docs' commands run.
func cliBin(t *testing.T) string {
	t.Helper()
	if !raceEnabled() {
		return heedBin
	}
	cliOnce.Do(func() {
		cliPath = heedBin + "-norace"
		out, err := exec.Command("go", "build", "-o", cliPath, ".").CombinedOutput()
		if err != nil {
			cliErr = fmt.Errorf("go build heed without -race: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

var (
	helpMu    sync.Mutex
	helpCache = map[string]string{}
)

// helpOf returns `heed <path...> --help`, once per path.
func helpOf(t *testing.T, path []string) string {
	t.Helper()
	key := strings.Join(path, " ")
	helpMu.Lock()
	defer helpMu.Unlock()
	if h, ok := helpCache[key]; ok {
		return h
	}
	out, err := exec.Command(cliBin(t), append(append([]string{}, path...), "--help")...).CombinedOutput()
	if err != nil {
		t.Fatalf("heed %s --help: %v\n%s", key, err, out)
	}
	helpCache[key] = string(out)
	return string(out)
}

// findNatsCLI returns the nats CLI: in PATH, or where go install put it.
func findNatsCLI() string {
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return ""
	}
	lines := strings.Split(string(out), "\n")
	for i, dir := range lines[:min(2, len(lines))] {
		if dir = strings.TrimSpace(dir); dir == "" {
			continue
		}
		if i == 1 {
			dir = filepath.Join(strings.Split(dir, string(os.PathListSeparator))[0], "bin")
		}
		if p := filepath.Join(dir, "nats"); fileExists(p) {
			return p
		}
	}
	return ""
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (nothing)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// startProcIn is startProc with a working directory ("" is the test's).
func startProcIn(t *testing.T, dir, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, done: make(chan struct{})}
	p.cmd = exec.Command(heedBin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			// Every long-running heed command stops cleanly on Ctrl-C.
			_ = p.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-p.done:
				p.checkCleanExit(syscall.SIGINT)
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
				t.Errorf("%s did not exit within 10s of SIGINT; killed", p.name)
			}
		}
		if t.Failed() {
			p.dump()
		}
	})
	return p
}
