// Package tool runs the tools skills call: exec tools (a program and an
// argv template, no shell) and NATS tools (request/reply on heed.tool.<name>,
// served by any process in any language). Tools are operator configuration
// loaded by the runner; a skill can only name them.
package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/heedhq/heed/lib/skill"
	"gopkg.in/yaml.v3"
)

// Kinds of tools.
const (
	KindExec = "exec"
	KindNATS = "nats"
)

// Defaults.
const (
	DefaultTimeout        = 60 * time.Second
	DefaultMaxOutputBytes = 1 << 20
	SubjectPrefix         = "heed.tool."
)

// Spec is one tool as the tools file declares it.
type Spec struct {
	Name        string            `yaml:"-"`
	Kind        string            `yaml:"kind"`
	Description string            `yaml:"description"`
	Command     string            `yaml:"command"` // exec: program path (relative to the tools file) or name in PATH
	Args        []string          `yaml:"args"`    // exec: one template per argv element
	Timeout     string            `yaml:"timeout"`
	Env         []string          `yaml:"env"`     // exec: variables passed through from the runner's environment
	SetEnv      map[string]string `yaml:"set_env"` // exec: variables set to fixed values
	Subject     string            `yaml:"subject"` // nats: default heed.tool.<name>
	Cluster     string            `yaml:"cluster"` // the cluster the tool acts on (the healer's login fix uses it)
	MaxOutput   int               `yaml:"max_output_bytes"`
	// Idempotent (default true) says the tool honours HEED_IDEMPOTENCY_KEY
	// (or Heed-Idempotency-Key): a call made again with the same key does
	// not do the work twice. A tool that cannot (idempotent: false) is not
	// called again when its result is unknown after a crash: a person is
	// asked first.
	Idempotent *bool `yaml:"idempotent"`

	// Review classifies the tool for change sets (docs/CHANGESETS.md):
	// immediate (the default) runs when called; deferred queues the call
	// as an item of a change set for a person to confirm, reject or defer.
	Review string `yaml:"review"`
	// Summary is a template over args for an item's summary
	// ("Set estimate to {{ args.minutes }} min"); without one heed writes
	// tool(arg=value, ...).
	Summary string `yaml:"summary"`
	// Group is the heading the tool's items are shown under.
	Group string `yaml:"group"`
	// Check names a tool called with the item's args and before (as
	// args.before) before a confirmed item is applied: it succeeds when
	// the item is still current and fails, saying why, when its target
	// changed since the proposal (the item is then not applied).
	Check string `yaml:"check"`
	// Explode makes a deferred batch tool's call one item per element of
	// a list argument, each a call of a singular tool.
	Explode *Explode `yaml:"explode"`

	timeout time.Duration
	summary *skill.Template
	argv    []*skill.Template
	program string
}

// Review classes.
const (
	ReviewImmediate = "immediate"
	ReviewDeferred  = "deferred"
)

// Explode declares how a batch tool's call becomes one item per element:
// each element of args[Field] is a call of Tool with the element's fields
// (an element that is not an object is passed as "item") over the call's
// other args.
type Explode struct {
	Field string `yaml:"field"`
	Tool  string `yaml:"tool"`
}

// Deferred reports whether calls of the tool are queued for review.
func (s *Spec) Deferred() bool { return s.Review == ReviewDeferred }

// RenderSummary renders the tool's summary template for args; ok is false
// when the tool has none or it fails (the caller writes its own).
func (s *Spec) RenderSummary(args map[string]any) (string, bool) {
	if s.summary == nil {
		return "", false
	}
	out, err := s.summary.RenderString(map[string]any{"args": args})
	if err != nil || strings.TrimSpace(out) == "" {
		return "", false
	}
	return out, true
}

// Timeout is the tool's time limit.
func (s *Spec) TimeoutDuration() time.Duration { return s.timeout }

// IsIdempotent reports whether a call may be made again with the same key.
func (s *Spec) IsIdempotent() bool { return s.Idempotent == nil || *s.Idempotent }

// Registry is the loaded tools file.
type Registry struct {
	File  string
	tools map[string]*Spec
}

// Names lists the tools, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.tools))
	for n := range r.tools {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Get returns a tool by name.
func (r *Registry) Get(name string) (*Spec, bool) {
	if r == nil {
		return nil, false
	}
	s, ok := r.tools[name]
	return s, ok
}

var toolNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,127}$`)

// argvNames are the variables an argv template may use.
var argvNames = map[string]any{"args": map[string]any{}, "run": map[string]any{}}

// LoadFile loads a tools file.
func LoadFile(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tools file: %w", err)
	}
	return Load(path, b)
}

// Load parses a tools file (see docs/SKILLS.md). Relative exec commands
// resolve against the file's directory.
func Load(path string, src []byte) (*Registry, error) {
	var doc struct {
		Tools map[string]*Spec `yaml:"tools"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	r := &Registry{File: path, tools: map[string]*Spec{}}
	dir := filepath.Dir(path)
	var problems []string
	for name, s := range doc.Tools {
		if s == nil {
			problems = append(problems, fmt.Sprintf("tool %s: empty definition", name))
			continue
		}
		s.Name = name
		if err := s.prepare(path, dir); err != nil {
			problems = append(problems, fmt.Sprintf("tool %s: %v", name, err))
			continue
		}
		r.tools[name] = s
	}
	for name, s := range r.tools {
		if err := s.checkRefs(r); err != nil {
			problems = append(problems, fmt.Sprintf("tool %s: %v", name, err))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("%s: %s", path, strings.Join(problems, "; "))
	}
	return r, nil
}

// summaryNames are the variables a summary template may use.
var summaryNames = map[string]any{"args": map[string]any{}}

// checkRefs checks what a tool names of other tools.
func (s *Spec) checkRefs(r *Registry) error {
	if s.Check != "" {
		if _, ok := r.tools[s.Check]; !ok || s.Check == s.Name {
			return fmt.Errorf("check: %q is not another tool of this file", s.Check)
		}
	}
	if x := s.Explode; x != nil {
		if !s.Deferred() {
			return errors.New("explode: only a deferred tool is exploded (set review: deferred)")
		}
		if x.Field == "" {
			return errors.New("explode: field names the list argument to split")
		}
		if _, ok := r.tools[x.Tool]; !ok || x.Tool == s.Name {
			return fmt.Errorf("explode: tool %q is not another tool of this file", x.Tool)
		}
	}
	return nil
}

func (s *Spec) prepare(file, dir string) error {
	if !toolNameRE.MatchString(s.Name) {
		return errors.New("name: use letters, digits, '_' and '-'")
	}
	switch s.Review {
	case "":
		s.Review = ReviewImmediate
	case ReviewImmediate, ReviewDeferred:
	default:
		return fmt.Errorf("review %q: use immediate or deferred", s.Review)
	}
	if s.Summary != "" {
		t, err := skill.CompileTemplate(s.Summary, skill.Pos{File: file}, summaryNames)
		if err != nil {
			return fmt.Errorf("summary %q: %v", s.Summary, err)
		}
		s.summary = t
	}
	s.timeout = DefaultTimeout
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("timeout %q is not a positive duration", s.Timeout)
		}
		s.timeout = d
	}
	if s.MaxOutput <= 0 {
		s.MaxOutput = DefaultMaxOutputBytes
	}
	switch s.Kind {
	case "", KindExec:
		s.Kind = KindExec
		if s.Command == "" {
			return errors.New("exec tool needs a command")
		}
		s.program = s.Command
		if strings.Contains(s.Command, "/") && !filepath.IsAbs(s.Command) {
			s.program = filepath.Join(dir, s.Command)
		}
		for i, a := range s.Args {
			t, err := skill.CompileTemplate(a, skill.Pos{File: file}, argvNames)
			if err != nil {
				return fmt.Errorf("args[%d] %q: %v", i, a, err)
			}
			s.argv = append(s.argv, t)
		}
	case KindNATS:
		if s.Subject == "" {
			s.Subject = SubjectPrefix + s.Name
		}
		if s.Command != "" || len(s.Args) > 0 {
			return errors.New("a nats tool has no command or args")
		}
	default:
		return fmt.Errorf("kind %q: use exec or nats", s.Kind)
	}
	return nil
}

// Call is one invocation of a tool.
type Call struct {
	Tool           string         `json:"tool"`
	Args           map[string]any `json:"args"`
	RunID          string         `json:"run_id"`
	Step           string         `json:"step"`
	Attempt        int            `json:"attempt"`
	IdempotencyKey string         `json:"idempotency_key"`
}

// IdempotencyKey is the key of one attempt of one step of one run. A step
// interrupted by a crash is retried with the same key, so a tool that
// honours it does its work once.
func IdempotencyKey(runID string, stepIndex, attempt int) string {
	return fmt.Sprintf("%s/%d/%d", runID, stepIndex, attempt)
}

// Error is a tool failure.
type Error struct {
	Message  string `json:"message"`
	Kind     string `json:"kind,omitempty"` // exit, timeout, not_found, unavailable, tool, cancelled
	ExitCode *int   `json:"exit_code,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Result is the outcome of a call.
type Result struct {
	Output   any
	Err      *Error
	Duration time.Duration
}

// Invoker runs calls. NATS tools need a requester (a NATS connection).
type Invoker struct {
	Registry  *Registry
	Requester Requester
}

// Invoke runs one call to completion or ctx's end.
func (in *Invoker) Invoke(ctx context.Context, c Call) Result {
	start := time.Now()
	spec, ok := in.Registry.Get(c.Tool)
	if !ok {
		return Result{Err: &Error{Kind: "not_found", Message: fmt.Sprintf("unknown tool %q (not in the tools file)", c.Tool)}}
	}
	ctx, cancel := context.WithTimeout(ctx, spec.timeout)
	defer cancel()
	var r Result
	switch spec.Kind {
	case KindExec:
		r = runExec(ctx, spec, c)
	case KindNATS:
		r = requestNATS(ctx, in.Requester, spec, c)
	}
	r.Duration = time.Since(start)
	return r
}

// parseOutput returns JSON output as structured data, else trimmed text.
func parseOutput(b []byte) any {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return nil
	}
	if t[0] == '{' || t[0] == '[' || t[0] == '"' {
		var v any
		d := json.NewDecoder(bytes.NewReader(t))
		d.UseNumber()
		if d.Decode(&v) == nil && !d.More() {
			return v
		}
	}
	return string(t)
}
