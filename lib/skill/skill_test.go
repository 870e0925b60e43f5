package skill_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/skill"
)

// examples are the skills shipped in skills/: they must always load.
func examples(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("../../skills/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		if filepath.Base(f) == "tools.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	if len(out) < 3 {
		t.Fatalf("found %d example skills in ../../skills, want at least 3", len(out))
	}
	return out
}

func TestLoadExamples(t *testing.T) {
	for name, src := range examples(t) {
		sk, err := skill.Load(name, src)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if sk.Name != strings.TrimSuffix(name, ".yaml") {
			t.Errorf("%s: name %q", name, sk.Name)
		}
		if sk.Source != string(src) || !strings.HasPrefix(sk.Digest, "sha256:") || len(sk.Digest) != len("sha256:")+64 {
			t.Errorf("%s: source or digest not kept: digest %q", name, sk.Digest)
		}
		if sk.File != name {
			t.Errorf("%s: file %q", name, sk.File)
		}
	}
}

func TestLoadReleaseProd(t *testing.T) {
	src := examples(t)["release_prod.yaml"]
	sk, err := skill.Load("release_prod.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []skill.Kind
	var names []string
	for i, st := range sk.Steps {
		if st.Index != i {
			t.Errorf("step %s has index %d, want %d", st.Name, st.Index, i)
		}
		kinds = append(kinds, st.Kind)
		names = append(names, st.Name)
	}
	if want := []string{"check_image", "plan", "confirm_release", "open_mr"}; !reflect.DeepEqual(names, want) {
		t.Errorf("steps %v, want %v", names, want)
	}
	if want := []skill.Kind{skill.KindTool, skill.KindCompute, skill.KindConfirm, skill.KindTool}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	c := sk.Steps[2].Confirm
	if c.Default != "cancel" || c.Timeout != 300*time.Second || !c.AIAssist || !c.LearnPreference || len(c.Options) != 2 {
		t.Errorf("confirm = %+v", c)
	}
	mr := sk.Steps[3]
	if mr.OnError != skill.OnErrorRetry || mr.Retry.Attempts != 3 || mr.Retry.Backoff != time.Second || mr.Output != "mr" {
		t.Errorf("open_mr = on_error %s retry %+v output %q", mr.OnError, mr.Retry, mr.Output)
	}
	if got := sk.Steps[0].Pos.Line; got != 12 {
		t.Errorf("check_image at line %d, want 12", got)
	}
	// The compute step evaluates against a run's variables.
	v, err := sk.Steps[1].Compute.Eval(map[string]any{"inputs": map[string]any{"commit_sha": "0123456789abcdef", "environment": "stage"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"sha": "0123456789abcdef", "short": "01234567", "environment": "stage"}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("plan = %#v, want %#v", v, want)
	}
	// Args render to typed values: one {{ }} keeps its type.
	args, err := sk.Steps[0].Args.Render(map[string]any{"inputs": map[string]any{"commit_sha": "abc"}})
	if err != nil || !reflect.DeepEqual(args, map[string]any{"tag": "abc"}) {
		t.Errorf("args = %#v, %v", args, err)
	}
	// The message is a multi-line template.
	msg, err := c.Message.RenderString(map[string]any{"plan": want, "image": map[string]any{"image": "quay.io/x:y"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg, "Ready to release 01234567 (quay.io/x:y) to stage.\n") {
		t.Errorf("message = %q", msg)
	}
}

// problems loads src and returns its problems as text, one per line, and
// fails the test if it loaded.
func problems(t *testing.T, src string) []string {
	t.Helper()
	sk, err := skill.Load("s.yaml", []byte(src))
	if err == nil {
		t.Fatalf("loaded a bad skill: %+v", sk)
	}
	if sk != nil {
		t.Errorf("Load returned a skill and an error")
	}
	var errs *skill.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %T is not *skill.Errors: %v", err, err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(errs.List) {
		t.Errorf("%d lines of text for %d problems:\n%s", len(lines), len(errs.List), err)
	}
	return lines
}

// TestLintLines checks that every problem names its file and exact line.
func TestLintLines(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string // each a prefix "s.yaml:LINE" plus a fragment, in line order
	}{
		{
			name: "misspelled variable in a confirm message and in args",
			src: `name: release
inputs:
  commit_sha: {type: string, required: true}
  environment: {type: string, default: production}
steps:
  - name: check
    tool: quay_check
    args:
      tag: "{{ inputs.comit_sha }}"
  - name: confirm
    confirm:
      message: |
        Release {{ inputs.commit_sha }}
        to {{ enviroment }}?
`,
			want: []string{
				`s.yaml:9:12: step "check" args.tag: unknown input "comit_sha" (declared: commit_sha, environment)`,
				"s.yaml:14: step \"confirm\" message: unknown name enviroment in `enviroment`",
			},
		},
		{
			name: "syntax errors in expressions",
			src: `name: t
steps:
  - name: plan
    compute: |
      {"a": 1,
       "b": )}
  - name: x
    compute: 1 +* 2
  - name: y
    condition: 1 +
    compute: 3
`,
			want: []string{
				"s.yaml:6: step \"plan\" compute: unexpected token Bracket(\")\")",
				"s.yaml:8:14: step \"x\" compute: unexpected token Operator(\"*\") in `1 +* 2`",
				"s.yaml:10:16: step \"y\" condition: unexpected token EOF",
			},
		},
		{
			name: "a later line of a multi-line message",
			src: `name: t
steps:
  - name: c
    confirm:
      title: Go {{ nope }}
      message: |
        line one

        three {{ 1 + }} and {{ undefined_thing }}
`,
			want: []string{
				`s.yaml:5:14: step "c" title: unknown name nope`,
				`s.yaml:9: step "c" message: unexpected token EOF`,
				`s.yaml:9: step "c" message: unknown name undefined_thing`,
			},
		},
		{
			name: "an output used before the step that binds it",
			src: `name: t
steps:
  - name: a
    compute: later + 1
  - name: b
    compute: 2
    output: later
`,
			want: []string{`s.yaml:4:14: step "a" compute: unknown name later`},
		},
		{
			name: "unknown fields",
			src: `name: t
descripton: typo
steps:
  - name: a
    compute: 1
    colour: red
  - name: b
    tool: t
    retry: {attempts: 2, jitter: 1}
    on_error: retry
`,
			want: []string{
				`s.yaml:2:1: skill: unknown field "descripton"`,
				`s.yaml:6:5: step 1: unknown field "colour"`,
				`s.yaml:9:26: step "b" retry: unknown field "jitter"`,
			},
		},
		{
			name: "duplicate step names and outputs",
			src: `name: t
steps:
  - name: a
    compute: 1
    output: x
  - name: b
    compute: 2
  - name: a
    compute: 3
    output: x
`,
			want: []string{
				`s.yaml:8:5: step name "a" is already used at line 3`,
				`s.yaml:8:5: output "x" is already bound at line 3`,
			},
		},
		{
			name: "default not among the options",
			src: `name: t
steps:
  - name: c
    confirm:
      message: go?
      options:
        - {label: Yes, value: proceed}
        - {label: No, value: cancel}
      default: maybe
`,
			want: []string{`s.yaml:9:16: step "c": default "maybe" is not one of the option values`},
		},
		{
			name: "on_error typo and retry without on_error: retry",
			src: `name: t
steps:
  - name: a
    tool: x
    on_error: retyr
  - name: b
    tool: x
    retry: {attempts: 2}
`,
			want: []string{
				`s.yaml:5:15: step "a": on_error "retyr": use fail, continue or retry`,
				`s.yaml:8:12: step "b": retry is set but on_error is "fail"`,
			},
		},
		{
			name: "bad retry values",
			src: `name: t
steps:
  - name: a
    tool: x
    on_error: retry
    retry:
      attempts: 50
      backoff: soon
`,
			want: []string{
				`s.yaml:7:17: step "a": retry attempts must be 1 to 20`,
				`s.yaml:8:16: step "a" retry backoff: "soon" is not a positive duration`,
			},
		},
		{
			name: "steps need exactly one kind and a name",
			src: `name: t
steps:
  - name: a
    tool: x
    compute: 1
  - compute: 2
  - name: c
    compute: 3
    args: {a: 1}
`,
			want: []string{
				`s.yaml:3:5: step "a" needs exactly one of tool, compute or confirm`,
				`s.yaml:6:5: step 2 has no name`,
				`s.yaml:9:11: step "c": args belong to tool steps`,
			},
		},
		{
			name: "inputs: unknown type, bad default, bad name",
			src: `name: t
inputs:
  count: {type: integer, default: many}
  when: date
  bad-name: string
steps:
  - name: a
    compute: inputs.count
`,
			want: []string{
				`s.yaml:3:10: input count: default many is not an integer`,
				`s.yaml:4:9: input when: unknown type "date"`,
				`s.yaml:5:13: input name "bad-name"`,
			},
		},
		{
			name: "reserved output and bad names",
			src: `name: 9lives
steps:
  - name: a b
    compute: 1
    output: inputs
`,
			want: []string{
				`s.yaml:1:7: name "9lives"`,
				`s.yaml:3:11: step name "a b"`,
				`s.yaml:5:13: step "a b": output "inputs" must be an identifier`,
			},
		},
		{
			name: "unclosed template",
			src: `name: t
steps:
  - name: a
    tool: x
    args:
      v: |
        first
        second {{ inputs
`,
			want: []string{`s.yaml:8: step "a" args.v: unclosed {{ in template`},
		},
		{
			name: "invalid YAML",
			src:  "name: t\nsteps:\n  - name: a\n    compute: a: b\n",
			want: []string{`s.yaml:4: not valid YAML: mapping values are not allowed in this context`},
		},
		{
			name: "no steps",
			src:  "name: t\nsteps: []\n",
			want: []string{`s.yaml:2:8: skill needs a non-empty list of steps`},
		},
		{
			name: "not a mapping",
			src:  "- a\n- b\n",
			want: []string{`s.yaml:1:1: skill must be a mapping`},
		},
		{
			name: "YAML alias in args",
			src:  "name: t\nsteps:\n  - name: a\n    compute: &x 1\n  - name: b\n    tool: t\n    args: {a: *x}\n",
			want: []string{`s.yaml:7:15: step "b" args.a: YAML aliases are not supported`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := problems(t, tc.src)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("problem %d:\n got  %s\n want %s…", i, got[i], w)
				}
			}
		})
	}
}

func TestLoadEmptyAndHuge(t *testing.T) {
	for name, src := range map[string]string{"empty": "", "comment only": "# nothing\n"} {
		got := problems(t, src)
		if len(got) != 1 || got[0] != "s.yaml: empty skill" {
			t.Errorf("%s: %q", name, got)
		}
	}
	big := "name: t\nsteps:\n  - name: a\n    compute: 1\n# " + strings.Repeat("x", skill.MaxSourceBytes) + "\n"
	got := problems(t, big)
	if len(got) != 1 || !strings.Contains(got[0], "the limit is 262144") {
		t.Errorf("huge: %q", got)
	}
	var steps strings.Builder
	steps.WriteString("name: t\nsteps:\n")
	for range skill.MaxSteps + 1 {
		steps.WriteString("  - {compute: 1}\n")
	}
	got = problems(t, steps.String())
	if len(got) != 1 || !strings.Contains(got[0], "501 steps; the limit is 500") {
		t.Errorf("too many steps: %q", got)
	}
}

// TestLoadGood covers forms every skill author uses.
func TestLoadGood(t *testing.T) {
	src := `name: good
description: every kind of step
inputs:
  n: integer
  who: {type: string, default: world}
  flags: {type: object, default: {a: 1}}
steps:
  - name: greet
    compute: '"hello " + inputs.who'
    output: greeting
  - name: maybe
    condition: inputs.n > 2
    tool: echo
    args:
      text: "{{ greeting }}, n={{ inputs.n }}"
      n: "{{ inputs.n }}"
      fixed: 3
      list: ["{{ inputs.who }}", 2]
      nested: {deep: "{{ steps.greet.status }}"}
    on_error: retry
    retry: {attempts: 4, backoff: 250ms, max_backoff: 1s}
  - name: ask
    confirm:
      message: ok?
      options: [{value: yes}, {value: no, label: Nope}]
summary: "{{ greeting }}"
`
	sk, err := skill.Load("good.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(sk.Inputs) != 3 || sk.Inputs[0].Type != "integer" || sk.Inputs[1].Default != "world" || !sk.Inputs[1].HasDefault {
		t.Errorf("inputs = %+v", sk.Inputs)
	}
	st := sk.Steps[1]
	if st.Condition == nil || st.Retry != (skill.Retry{Attempts: 4, Backoff: 250 * time.Millisecond, MaxBackoff: time.Second}) {
		t.Errorf("maybe: condition %v retry %+v", st.Condition, st.Retry)
	}
	for attempt, want := range map[int]time.Duration{1: 250 * time.Millisecond, 2: 500 * time.Millisecond, 3: time.Second, 4: time.Second, 10: time.Second} {
		if got := st.Retry.Delay(attempt); got != want {
			t.Errorf("Delay(%d) = %s, want %s", attempt, got, want)
		}
	}
	env := map[string]any{
		"inputs":   map[string]any{"n": 3, "who": "ann"},
		"greeting": "hello ann",
		"steps":    map[string]any{"greet": map[string]any{"status": "completed"}},
	}
	args, err := st.Args.Render(env)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"text": "hello ann, n=3", "n": 3, "fixed": 3, "list": []any{"ann", 2}, "nested": map[string]any{"deep": "completed"}}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("args = %#v\nwant   %#v", args, want)
	}
	c := sk.Steps[2].Confirm
	if c.Default != "no" || c.Options[0].Label != "yes" || c.Options[1].Label != "Nope" || c.Timeout != skill.DefaultTimeout {
		t.Errorf("confirm = %+v", c)
	}
	// Without options a confirmation offers proceed and cancel, default cancel.
	sk2, err := skill.Load("d.yaml", []byte("name: d\nsteps:\n  - name: c\n    confirm: {message: \"sure?\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := sk2.Steps[0].Confirm; len(c.Options) != 2 || c.Options[0].Value != "proceed" || c.Default != "cancel" {
		t.Errorf("default confirm = %+v", c)
	}
}

func TestResolveInputs(t *testing.T) {
	sk, err := skill.Load("in.yaml", []byte(`name: inputs
inputs:
  sha: {type: string, required: true}
  count: {type: integer, default: 2}
  ratio: number
  dry: {type: boolean, default: false}
  tags: array
  meta: object
  note: string
steps:
  - name: a
    compute: inputs.count
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		given map[string]any
		want  map[string]any
		err   []string
	}{
		{
			name:  "defaults fill the rest and absent optional inputs are nil",
			given: map[string]any{"sha": "abc"},
			want:  map[string]any{"sha": "abc", "count": 2, "ratio": nil, "dry": false, "tags": nil, "meta": nil, "note": nil},
		},
		{
			name:  "strings from the command line are coerced",
			given: map[string]any{"sha": "abc", "count": "3", "ratio": " 0.5", "dry": "true", "tags": `["a","b"]`, "meta": `{"k":1}`},
			want:  map[string]any{"sha": "abc", "count": 3, "ratio": 0.5, "dry": true, "tags": []any{"a", "b"}, "meta": map[string]any{"k": float64(1)}, "note": nil},
		},
		{
			name:  "JSON numbers that are whole are integers",
			given: map[string]any{"sha": "abc", "count": float64(7), "ratio": 2},
			want:  map[string]any{"sha": "abc", "count": 7, "ratio": float64(2), "dry": false, "tags": nil, "meta": nil, "note": nil},
		},
		{name: "missing required", given: map[string]any{}, err: []string{`missing required input "sha"`}},
		{name: "unknown input", given: map[string]any{"sha": "a", "shaa": "b"}, err: []string{`unknown input "shaa"`}},
		{
			name:  "bad values",
			given: map[string]any{"sha": 5, "count": "3.5", "dry": "maybe", "tags": "{", "meta": "[1]"},
			err:   []string{"input sha: 5 is not a string", "input count: 3.5 is not an integer", "input dry: maybe is not true or false", `input tags: "{" is not JSON`, "input meta: [1] is not an object"},
		},
		{name: "a fraction is not an integer", given: map[string]any{"sha": "a", "count": 2.5}, err: []string{"input count: 2.5 is not an integer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sk.ResolveInputs(tc.given)
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("got  %#v\nwant %#v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; got %#v", got)
			}
			for _, w := range tc.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestCacheByDigest(t *testing.T) {
	c := skill.NewCache()
	src := string(examples(t)["release_prod.yaml"])
	first, err := c.Load("x.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Load("x.yaml", src)
	if err != nil || second != first {
		t.Errorf("second load compiled again (%p vs %p) or failed: %v", second, first, err)
	}
	// Keyed by content: another source is another skill.
	other := strings.Replace(src, "name: release_prod", "name: release_other", 1)
	if sk, err := c.Load("x.yaml", other); err != nil || sk == first || sk.Name != "release_other" {
		t.Errorf("another source gave %v (same as the first: %v), err %v", sk, sk == first, err)
	}
	if _, err := c.Load("bad.yaml", "name: t\n"); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("cache loaded a bad skill, or its error does not name its file: %v", err)
	}
	if _, err := c.Load("bad2.yaml", "name: t\n"); err == nil || !strings.Contains(err.Error(), "bad2.yaml") {
		t.Errorf("a bad skill's error names another file: %v", err)
	}
	if n := c.Len(); n != 2 {
		t.Errorf("cache holds %d skills, want 2 (bad ones are not kept)", n)
	}
}

// TestCacheConcurrentAndBounded: many callers asking for one new skill at
// once get one compiled skill, and the cache stays bounded however many
// distinct skills pass through it.
func TestCacheConcurrentAndBounded(t *testing.T) {
	c := skill.NewCache()
	src := string(examples(t)["release_prod.yaml"])
	var wg sync.WaitGroup
	got := make([]*skill.Skill, 16)
	for i := range got {
		wg.Go(func() {
			sk, err := c.Load("x.yaml", src)
			if err != nil {
				t.Error(err)
			}
			got[i] = sk
		})
	}
	wg.Wait()
	for _, sk := range got {
		if sk != got[0] {
			t.Fatalf("concurrent loads compiled the skill more than once")
		}
	}
	for i := range 600 {
		if _, err := c.Load("x.yaml", fmt.Sprintf("name: s%d\nsteps:\n  - name: c\n    confirm: {message: \"sure?\"}\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Len(); n > 512 || n < 100 {
		t.Fatalf("cache holds %d skills after 601 distinct ones; want at most 512", n)
	}
	// The most recently used are kept.
	sk, err := c.Load("y.yaml", "name: s599\nsteps:\n  - name: c\n    confirm: {message: \"sure?\"}\n")
	if err != nil || sk.File != "x.yaml" {
		t.Fatalf("the most recent skill was not kept (file %q, err %v)", sk.File, err)
	}
}

// checkLoaded asserts what the runner relies on in every skill Load
// accepts: it never has to nil-check a step's parts.
func checkLoaded(t *testing.T, sk *skill.Skill) {
	t.Helper()
	if sk.Name == "" || len(sk.Steps) == 0 || len(sk.Steps) > skill.MaxSteps || !strings.HasPrefix(sk.Digest, "sha256:") {
		t.Fatalf("loaded skill is incomplete: name %q, %d steps, digest %q", sk.Name, len(sk.Steps), sk.Digest)
	}
	names := map[string]bool{}
	for i, st := range sk.Steps {
		if st == nil || st.Index != i || st.Name == "" || names[st.Name] {
			t.Fatalf("step %d: %+v", i, st)
		}
		names[st.Name] = true
		switch st.Kind {
		case skill.KindTool:
			if st.Tool == "" {
				t.Fatalf("tool step %s has no tool", st.Name)
			}
		case skill.KindCompute:
			if st.Compute == nil {
				t.Fatalf("compute step %s has no expression", st.Name)
			}
		case skill.KindConfirm:
			c := st.Confirm
			if c == nil || c.Message == nil || len(c.Options) == 0 {
				t.Fatalf("confirm step %s is incomplete: %+v", st.Name, c)
			}
			found := false
			for _, o := range c.Options {
				found = found || o.Value == c.Default
			}
			if !found {
				t.Fatalf("confirm step %s: default %q is not an option", st.Name, c.Default)
			}
		default:
			t.Fatalf("step %s has kind %q", st.Name, st.Kind)
		}
		switch st.OnError {
		case skill.OnErrorFail, skill.OnErrorContinue, skill.OnErrorRetry:
		default:
			t.Fatalf("step %s: on_error %q", st.Name, st.OnError)
		}
		if st.Retry.Attempts < 1 || st.Retry.Attempts > skill.MaxAttempts {
			t.Fatalf("step %s: %d attempts", st.Name, st.Retry.Attempts)
		}
	}
}

// FuzzLoad feeds Load arbitrary documents. Load must never panic (nor hide
// a panic as an internal error) and must return either a skill the runner
// can use or an *Errors with at least one problem, every one with text.
// Seeds: the example skills, broken variants of them, and
// testdata/fuzz/FuzzLoad.
func FuzzLoad(f *testing.F) {
	for _, src := range examples(f) {
		f.Add(src)
		s := string(src)
		for _, broken := range []string{
			strings.Replace(s, "inputs.", "inptus.", 1),
			strings.Replace(s, "{{", "{{ (", 1),
			strings.Replace(s, "}}", "", 1),
			strings.Replace(s, "steps:", "stepz:", 1),
			strings.Replace(s, "  - name:", "  - nam:", 2),
			strings.Replace(s, "name:", "name: &a", 1) + "\nx: *a\n",
			strings.Replace(s, "    ", "  ", 3),
			s[:len(s)/2],
			s + "\n  - name: extra\n    compute: {{\n",
		} {
			f.Add([]byte(broken))
		}
	}
	f.Add([]byte(""))
	f.Add([]byte("name: x\nsteps:\n  - name: a\n    compute: '{{ }}'\n"))
	f.Add([]byte("name: x\nsteps: [{name: a, confirm: {message: m, options: []}}]\n"))
	f.Add([]byte("name: x\ninputs: {a: {type: integer, default: [1]}}\nsteps: [{name: a, tool: t, args: [1]}]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		sk, err := skill.Load("fuzz.yaml", src)
		if err == nil {
			if sk == nil {
				t.Fatal("Load returned neither a skill nor an error")
			}
			checkLoaded(t, sk)
			// Whatever loads can have its inputs resolved without panicking.
			_, _ = sk.ResolveInputs(nil)
			return
		}
		if sk != nil {
			t.Fatalf("Load returned a skill and an error: %v", err)
		}
		var errs *skill.Errors
		if !errors.As(err, &errs) {
			t.Fatalf("error is %T, not *skill.Errors: %v", err, err)
		}
		if len(errs.List) == 0 {
			t.Fatal("*Errors with no problem")
		}
		for _, p := range errs.List {
			if strings.TrimSpace(p.Msg) == "" {
				t.Fatalf("problem at %s without text", p.Pos)
			}
			if strings.Contains(p.Msg, "internal error while loading") {
				t.Fatalf("Load panicked inside: %s", p.Msg)
			}
		}
		if strings.TrimSpace(err.Error()) == "" {
			t.Fatal("empty error text")
		}
	})
}
