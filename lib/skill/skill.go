// Package skill loads and checks skills: YAML workflows of tool calls,
// computed values and confirmations. Every expression and template is
// compiled when the skill loads, so mistakes surface with file:line before
// anything runs.
package skill

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr/types"
	"github.com/heedhq/heed/lib/textutil"
	"gopkg.in/yaml.v3"
)

// Limits on what a skill may contain.
const (
	MaxSourceBytes = 256 * 1024
	MaxSteps       = 500
	MaxAttempts    = 20
	DefaultTimeout = 300 * time.Second
)

// Kind is what a step does.
type Kind string

const (
	KindTool    Kind = "tool"
	KindCompute Kind = "compute"
	KindConfirm Kind = "confirm"
)

// OnError is what a failed step does.
type OnError string

const (
	OnErrorFail     OnError = "fail"
	OnErrorContinue OnError = "continue"
	OnErrorRetry    OnError = "retry"
)

// Skill is a loaded, checked skill.
type Skill struct {
	Name        string
	Description string
	Inputs      []Input
	Steps       []*Step
	Summary     *Template
	Source      string
	Digest      string // sha256:<hex> of Source
	File        string
}

// Input is a declared input.
type Input struct {
	Name        string
	Type        string // string, integer, number, boolean, object, array, any
	Description string
	Required    bool
	Default     any
	HasDefault  bool
	Pos         Pos
}

// Step is one step of a skill.
type Step struct {
	Name        string
	Index       int
	Description string
	Kind        Kind
	Tool        string
	Args        *Value
	// Before is what the step's call of a deferred tool changes, as the
	// skill saw it (a template mapping): the item's before → after, and
	// what the tool's check compares with before the item is applied.
	Before    *Value
	Compute   *Expr
	Confirm   *Confirm
	Condition *Expr
	OnError   OnError
	Retry     Retry
	Output    string
	Pos       Pos
}

// Retry is the retry policy of an on_error: retry step.
type Retry struct {
	Attempts   int           // total attempts, including the first
	Backoff    time.Duration // before the second attempt; doubles each time
	MaxBackoff time.Duration
}

// Delay is the wait before attempt n+1 after attempt n failed.
func (r Retry) Delay(attempt int) time.Duration {
	d := r.Backoff
	for i := 1; i < attempt && d < r.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.MaxBackoff)
}

// Confirm is a confirm step's question.
type Confirm struct {
	Title           *Template
	Message         *Template
	Options         []Option
	Timeout         time.Duration
	Default         string
	AIAssist        bool
	LearnPreference bool
	// Approvers, when given, are the only ones whose answers count.
	Approvers []string
	// Quorum: Required distinct answers for the same option (a vote for a
	// Veto option takes effect at once). Nil: the first answer decides.
	Quorum *Quorum
}

// Quorum is a confirm step's quorum.
type Quorum struct {
	Required int
	Veto     []string
}

// Option is one answer to a confirmation.
type Option struct {
	Label       string `json:"label"`
	Value       string `json:"value"`
	Description string `json:"description,omitempty"`
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,127}$`)
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
)

// reserved names cannot be step outputs.
var reserved = map[string]bool{"inputs": true, "steps": true, "run": true, "true": true, "false": true, "nil": true}

// Load parses and checks a skill. file names it in error messages. The
// error, if any, is *Errors listing every problem found.
func Load(file string, src []byte) (sk *Skill, err error) {
	errs := &Errors{}
	defer func() {
		// A malformed document must produce an error, never a panic.
		if r := recover(); r != nil {
			errs.add(Pos{File: file}, "internal error while loading: %v", r)
			sk, err = nil, errs
		}
	}()
	if len(src) > MaxSourceBytes {
		errs.add(Pos{File: file}, "skill is %d bytes; the limit is %d", len(src), MaxSourceBytes)
		return nil, errs
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		errs.add(Pos{File: file, Line: yamlErrLine(err)}, "not valid YAML: %s", cleanYAMLError(err))
		return nil, errs
	}
	if len(doc.Content) == 0 {
		errs.add(Pos{File: file}, "empty skill")
		return nil, errs
	}
	sum := sha256.Sum256(src)
	sk = &Skill{Source: string(src), Digest: "sha256:" + hex.EncodeToString(sum[:]), File: file}
	l := &loader{file: file, errs: errs, c: &compiler{file: file, errs: errs}}
	l.skill(doc.Content[0], sk)
	if err := errs.orNil(); err != nil {
		return nil, err
	}
	return sk, nil
}

type loader struct {
	file string
	errs *Errors
	c    *compiler
}

func (l *loader) pos(n *yaml.Node) Pos { return Pos{File: l.file, Line: n.Line, Col: n.Column} }

// fields returns a mapping's keys in order, reporting keys not in allowed.
func (l *loader) fields(n *yaml.Node, what string, allowed ...string) ([]string, map[string]*yaml.Node) {
	if n.Kind != yaml.MappingNode {
		l.errs.add(l.pos(n), "%s must be a mapping", what)
		return nil, nil
	}
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	var order []string
	m := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if _, dup := m[k.Value]; dup {
			l.errs.add(l.pos(k), "%s: %q given twice", what, k.Value)
			continue
		}
		if !ok[k.Value] {
			l.errs.add(l.pos(k), "%s: unknown field %q (allowed: %s)", what, k.Value, strings.Join(allowed, ", "))
			continue
		}
		order = append(order, k.Value)
		m[k.Value] = v
	}
	return order, m
}

func (l *loader) str(n *yaml.Node, what string) string {
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		l.errs.add(l.pos(n), "%s must be a string", what)
		return ""
	}
	return n.Value
}

func (l *loader) boolean(n *yaml.Node, what string) bool {
	if n == nil {
		return false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		l.errs.add(l.pos(n), "%s must be true or false", what)
	}
	return b
}

func (l *loader) skill(n *yaml.Node, sk *Skill) {
	_, f := l.fields(n, "skill", "name", "description", "inputs", "steps", "summary")
	if f == nil {
		return
	}
	sk.Name = l.str(f["name"], "name")
	if f["name"] == nil {
		l.errs.add(l.pos(n), "skill has no name")
	} else if !nameRE.MatchString(sk.Name) {
		l.errs.add(l.pos(f["name"]), "name %q: use letters, digits, '_', '-', '.' (start with a letter)", sk.Name)
	}
	sk.Description = l.str(f["description"], "description")
	sc := scope{vars: map[string]any{"inputs": nil, "steps": nil, "run": nil}, inputs: map[string]bool{}}
	if in := f["inputs"]; in != nil {
		l.inputs(in, sk, sc)
	}
	stepsNode := f["steps"]
	if stepsNode == nil || stepsNode.Kind != yaml.SequenceNode || len(stepsNode.Content) == 0 {
		p := l.pos(n)
		if stepsNode != nil {
			p = l.pos(stepsNode)
		}
		l.errs.add(p, "skill needs a non-empty list of steps")
		return
	}
	if len(stepsNode.Content) > MaxSteps {
		l.errs.add(l.pos(stepsNode), "%d steps; the limit is %d", len(stepsNode.Content), MaxSteps)
		return
	}
	names := map[string]Pos{}
	outputs := map[string]Pos{}
	for i, sn := range stepsNode.Content {
		st := l.step(sn, i, sc)
		if st == nil {
			continue
		}
		if prev, dup := names[st.Name]; dup && st.Name != "" {
			l.errs.add(st.Pos, "step name %q is already used at line %d", st.Name, prev.Line)
		}
		names[st.Name] = st.Pos
		sc.steps = append(sc.steps, st.Name)
		if st.Output != "" {
			if prev, dup := outputs[st.Output]; dup {
				l.errs.add(st.Pos, "output %q is already bound at line %d", st.Output, prev.Line)
			}
			outputs[st.Output] = st.Pos
			sc.vars[st.Output] = types.Any
		}
		sk.Steps = append(sk.Steps, st)
	}
	if s := f["summary"]; s != nil {
		sk.Summary = l.c.template(l.str(s, "summary"), l.blockPos(s), sc, "summary")
	}
}

func (l *loader) blockPos(n *yaml.Node) Pos {
	p := l.pos(n)
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		p.Line++
		p.Col = 0
	}
	return p
}

var inputTypes = map[string]bool{"string": true, "integer": true, "number": true, "boolean": true, "object": true, "array": true, "any": true}

func (l *loader) inputs(n *yaml.Node, sk *Skill, sc scope) {
	order, f := l.fields(n, "inputs", anyKeys(n)...)
	for _, name := range order {
		v := f[name]
		in := Input{Name: name, Type: "string", Pos: l.pos(v)}
		if !identRE.MatchString(name) {
			l.errs.add(l.pos(v), "input name %q: use letters, digits and '_'", name)
		}
		switch v.Kind {
		case yaml.ScalarNode: // shorthand: name: type
			in.Type = v.Value
		case yaml.MappingNode:
			_, m := l.fields(v, "input "+name, "type", "description", "required", "default")
			if t := m["type"]; t != nil {
				in.Type = l.str(t, "type")
			}
			in.Description = l.str(m["description"], "description")
			in.Required = l.boolean(m["required"], "required")
			if d := m["default"]; d != nil {
				var dv any
				if err := d.Decode(&dv); err != nil {
					l.errs.add(l.pos(d), "input %s: default: %v", name, err)
				}
				in.Default, in.HasDefault = normalize(dv), true
			}
		default:
			l.errs.add(l.pos(v), "input %s must be a type name or a mapping", name)
		}
		if !inputTypes[in.Type] {
			l.errs.add(in.Pos, "input %s: unknown type %q (string, integer, number, boolean, object, array, any)", name, in.Type)
		} else if in.HasDefault {
			if _, err := CoerceInput(in, in.Default); err != nil {
				l.errs.add(in.Pos, "input %s: default %v", name, err)
			}
		}
		sk.Inputs = append(sk.Inputs, in)
		sc.inputs[name] = true
	}
}

func anyKeys(n *yaml.Node) []string {
	var out []string
	if n.Kind == yaml.MappingNode {
		for i := 0; i < len(n.Content); i += 2 {
			out = append(out, n.Content[i].Value)
		}
	}
	return out
}

func (l *loader) step(n *yaml.Node, i int, sc scope) *Step {
	_, f := l.fields(n, fmt.Sprintf("step %d", i+1), "name", "description", "tool", "args", "before", "compute", "confirm", "condition", "on_error", "retry", "output")
	if f == nil {
		return nil
	}
	st := &Step{Index: i, Pos: l.pos(n), OnError: OnErrorFail, Retry: Retry{Attempts: 3, Backoff: time.Second, MaxBackoff: 30 * time.Second}}
	st.Name = l.str(f["name"], "name")
	what := fmt.Sprintf("step %q", st.Name)
	if f["name"] == nil {
		l.errs.add(st.Pos, "step %d has no name", i+1)
		what = fmt.Sprintf("step %d", i+1)
	} else if !nameRE.MatchString(st.Name) {
		l.errs.add(l.pos(f["name"]), "step name %q: use letters, digits, '_', '-', '.'", st.Name)
	}
	st.Description = l.str(f["description"], "description")
	kinds := 0
	for _, k := range []string{"tool", "compute", "confirm"} {
		if f[k] != nil {
			kinds++
		}
	}
	if kinds != 1 {
		l.errs.add(st.Pos, "%s needs exactly one of tool, compute or confirm", what)
	}
	if c := f["condition"]; c != nil {
		st.Condition = l.c.expr(l.str(c, "condition"), l.pos(c), sc, what+" condition")
	}
	switch {
	case f["tool"] != nil:
		st.Kind = KindTool
		st.Tool = l.str(f["tool"], "tool")
		if !nameRE.MatchString(st.Tool) {
			l.errs.add(l.pos(f["tool"]), "%s: tool name %q is not valid", what, st.Tool)
		}
		if a := f["args"]; a != nil {
			if a.Kind != yaml.MappingNode {
				l.errs.add(l.pos(a), "%s: args must be a mapping", what)
			} else {
				st.Args = l.value(a, sc, what+" args")
			}
		}
		if b := f["before"]; b != nil {
			if b.Kind != yaml.MappingNode {
				l.errs.add(l.pos(b), "%s: before must be a mapping", what)
			} else {
				st.Before = l.value(b, sc, what+" before")
			}
		}
	case f["compute"] != nil:
		st.Kind = KindCompute
		st.Compute = l.c.expr(l.str(f["compute"], "compute"), l.blockPos(f["compute"]), sc, what+" compute")
		if f["args"] != nil {
			l.errs.add(l.pos(f["args"]), "%s: args belong to tool steps", what)
		}
		if f["before"] != nil {
			l.errs.add(l.pos(f["before"]), "%s: before belongs to tool steps", what)
		}
	case f["confirm"] != nil:
		st.Kind = KindConfirm
		st.Confirm = l.confirm(f["confirm"], sc, what)
		if f["args"] != nil {
			l.errs.add(l.pos(f["args"]), "%s: args belong to tool steps", what)
		}
		if f["before"] != nil {
			l.errs.add(l.pos(f["before"]), "%s: before belongs to tool steps", what)
		}
	}
	if o := f["on_error"]; o != nil {
		switch v := OnError(l.str(o, "on_error")); v {
		case OnErrorFail, OnErrorContinue, OnErrorRetry:
			st.OnError = v
		default:
			l.errs.add(l.pos(o), "%s: on_error %q: use fail, continue or retry", what, v)
		}
	}
	if r := f["retry"]; r != nil {
		_, m := l.fields(r, what+" retry", "attempts", "backoff", "max_backoff")
		if a := m["attempts"]; a != nil {
			n, err := strconv.Atoi(a.Value)
			if err != nil || n < 1 || n > MaxAttempts {
				l.errs.add(l.pos(a), "%s: retry attempts must be 1 to %d", what, MaxAttempts)
			} else {
				st.Retry.Attempts = n
			}
		}
		if b := m["backoff"]; b != nil {
			st.Retry.Backoff = l.duration(b, what+" retry backoff")
		}
		if b := m["max_backoff"]; b != nil {
			st.Retry.MaxBackoff = l.duration(b, what+" retry max_backoff")
		}
		if st.OnError != OnErrorRetry {
			l.errs.add(l.pos(r), "%s: retry is set but on_error is %q (set on_error: retry)", what, st.OnError)
		}
	}
	if o := f["output"]; o != nil {
		st.Output = l.str(o, "output")
		if !identRE.MatchString(st.Output) || reserved[st.Output] {
			l.errs.add(l.pos(o), "%s: output %q must be an identifier other than inputs, steps, run", what, st.Output)
		}
	}
	return st
}

func (l *loader) duration(n *yaml.Node, what string) time.Duration {
	s := l.str(n, what)
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs <= 0 {
			l.errs.add(l.pos(n), "%s must be positive", what)
		}
		return time.Duration(secs * float64(time.Second))
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		l.errs.add(l.pos(n), "%s: %q is not a positive duration (e.g. 30, 30s, 5m)", what, s)
	}
	return d
}

func (l *loader) confirm(n *yaml.Node, sc scope, what string) *Confirm {
	_, f := l.fields(n, what+" confirm", "title", "message", "options", "timeout", "default", "ai_assist", "learn_preference", "approvers", "quorum")
	if f == nil {
		return nil
	}
	c := &Confirm{Timeout: DefaultTimeout}
	if t := f["title"]; t != nil {
		c.Title = l.c.template(l.str(t, "title"), l.pos(t), sc, what+" title")
	}
	if m := f["message"]; m == nil || strings.TrimSpace(m.Value) == "" {
		l.errs.add(l.pos(n), "%s: confirm needs a message", what)
	} else {
		c.Message = l.c.template(l.str(m, "message"), l.blockPos(m), sc, what+" message")
	}
	if o := f["options"]; o != nil {
		if o.Kind != yaml.SequenceNode {
			l.errs.add(l.pos(o), "%s: options must be a list", what)
		} else {
			seen := map[string]bool{}
			for _, on := range o.Content {
				_, of := l.fields(on, what+" option", "label", "value", "description")
				if of == nil {
					continue
				}
				opt := Option{Label: l.str(of["label"], "label"), Value: l.str(of["value"], "value"), Description: l.str(of["description"], "description")}
				if opt.Value == "" {
					l.errs.add(l.pos(on), "%s: every option needs a value", what)
				}
				if opt.Label == "" {
					opt.Label = opt.Value
				}
				if seen[opt.Value] {
					l.errs.add(l.pos(on), "%s: option value %q appears twice", what, opt.Value)
				}
				seen[opt.Value] = true
				c.Options = append(c.Options, opt)
			}
		}
	} else {
		c.Options = []Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}}
	}
	if len(c.Options) == 0 {
		l.errs.add(l.pos(n), "%s: confirm needs at least one option", what)
	}
	if t := f["timeout"]; t != nil {
		c.Timeout = l.duration(t, what+" timeout")
	}
	if d := f["default"]; d != nil {
		c.Default = l.str(d, "default")
		found := false
		for _, o := range c.Options {
			found = found || o.Value == c.Default
		}
		if !found {
			l.errs.add(l.pos(d), "%s: default %q is not one of the option values", what, c.Default)
		}
	} else if len(c.Options) > 0 {
		// The safe default: cancel when offered, else the last option.
		c.Default = c.Options[len(c.Options)-1].Value
		for _, o := range c.Options {
			if o.Value == "cancel" {
				c.Default = "cancel"
			}
		}
	}
	c.AIAssist = l.boolean(f["ai_assist"], "ai_assist")
	c.LearnPreference = l.boolean(f["learn_preference"], "learn_preference")
	c.Approvers = l.approvers(f["approvers"], what)
	c.Quorum = l.quorum(f["quorum"], c, what)
	return c
}

// approvers reads a confirm step's approvers: a list of distinct,
// non-empty names.
func (l *loader) approvers(n *yaml.Node, what string) []string {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.errs.add(l.pos(n), "%s: approvers must be a non-empty list of names", what)
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, a := range n.Content {
		v := strings.TrimSpace(l.str(a, what+" approver"))
		switch {
		case v == "":
			l.errs.add(l.pos(a), "%s: an approver is empty", what)
		case seen[v]:
			l.errs.add(l.pos(a), "%s: approver %q appears twice", what, v)
		default:
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// quorum reads a confirm step's quorum: required between 2 and the number
// of approvers (when named), and veto values that are options.
func (l *loader) quorum(n *yaml.Node, c *Confirm, what string) *Quorum {
	if n == nil {
		return nil
	}
	_, f := l.fields(n, what+" quorum", "required", "veto")
	if f == nil {
		return nil
	}
	q := &Quorum{}
	if r := f["required"]; r == nil {
		l.errs.add(l.pos(n), "%s: quorum needs required (how many distinct approvers must agree)", what)
	} else if r.Kind != yaml.ScalarNode || r.Decode(&q.Required) != nil {
		l.errs.add(l.pos(r), "%s: quorum.required must be a whole number", what)
	} else if q.Required < 2 || q.Required > 100 {
		l.errs.add(l.pos(r), "%s: quorum.required is %d; it must be between 2 and 100 (leave quorum out for a single answer)", what, q.Required)
	} else if len(c.Approvers) > 0 && q.Required > len(c.Approvers) {
		l.errs.add(l.pos(r), "%s: quorum.required is %d but only %d approvers are named", what, q.Required, len(c.Approvers))
	}
	if v := f["veto"]; v != nil {
		if v.Kind != yaml.SequenceNode {
			l.errs.add(l.pos(v), "%s: quorum.veto must be a list of option values", what)
		} else {
			for _, vn := range v.Content {
				val := l.str(vn, what+" veto")
				if !slices.ContainsFunc(c.Options, func(o Option) bool { return o.Value == val }) {
					l.errs.add(l.pos(vn), "%s: veto %q is not one of the option values", what, val)
					continue
				}
				q.Veto = append(q.Veto, val)
			}
		}
	}
	return q
}

func (l *loader) value(n *yaml.Node, sc scope, what string) *Value {
	switch n.Kind {
	case yaml.MappingNode:
		v := &Value{Kind: ValueMap}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			v.Map = append(v.Map, MapEntry{Key: k, Value: l.value(n.Content[i+1], sc, what+"."+k)})
		}
		return v
	case yaml.SequenceNode:
		v := &Value{Kind: ValueList}
		for i, c := range n.Content {
			v.List = append(v.List, l.value(c, sc, fmt.Sprintf("%s[%d]", what, i)))
		}
		return v
	case yaml.AliasNode:
		l.errs.add(l.pos(n), "%s: YAML aliases are not supported", what)
		return &Value{Kind: ValueLiteral}
	}
	if n.Tag == "!!str" || n.Style != 0 {
		return &Value{Kind: ValueTemplate, Tmpl: l.c.template(n.Value, l.blockPos(n), sc, what)}
	}
	var x any
	if err := n.Decode(&x); err != nil {
		l.errs.add(l.pos(n), "%s: %v", what, err)
	}
	if s, ok := x.(string); ok {
		return &Value{Kind: ValueTemplate, Tmpl: l.c.template(s, l.blockPos(n), sc, what)}
	}
	return &Value{Kind: ValueLiteral, Lit: normalize(x)}
}

// normalize turns YAML-decoded values into JSON-shaped ones.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
		return x
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = normalize(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
		return x
	}
	return v
}

// CoerceInput converts v (a string from the command line, or a JSON value)
// to the input's declared type.
func CoerceInput(in Input, v any) (any, error) {
	s, isStr := v.(string)
	switch in.Type {
	case "any":
		return v, nil
	case "string":
		if isStr {
			return s, nil
		}
		return nil, fmt.Errorf("%v is not a string", v)
	case "integer":
		switch x := v.(type) {
		case int:
			return x, nil
		case int64:
			return int(x), nil
		case float64:
			if x == float64(int(x)) {
				return int(x), nil
			}
		case json.Number:
			if n, err := x.Int64(); err == nil {
				return int(n), nil
			}
		case string:
			if n, err := strconv.Atoi(strings.TrimSpace(x)); err == nil {
				return n, nil
			}
		}
		return nil, fmt.Errorf("%v is not an integer", v)
	case "number":
		switch x := v.(type) {
		case int:
			return float64(x), nil
		case float64:
			return x, nil
		case json.Number:
			return x.Float64()
		case string:
			if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
				return f, nil
			}
		}
		return nil, fmt.Errorf("%v is not a number", v)
	case "boolean":
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			if b, err := strconv.ParseBool(strings.TrimSpace(x)); err == nil {
				return b, nil
			}
		}
		return nil, fmt.Errorf("%v is not true or false", v)
	case "object", "array":
		if isStr {
			var x any
			if err := json.Unmarshal([]byte(s), &x); err != nil {
				return nil, fmt.Errorf("%q is not JSON", s)
			}
			v = x
		}
		if _, ok := v.(map[string]any); ok && in.Type == "object" {
			return v, nil
		}
		if _, ok := v.([]any); ok && in.Type == "array" {
			return v, nil
		}
		return nil, fmt.Errorf("%v is not an %s", v, in.Type)
	}
	return nil, fmt.Errorf("unknown type %q", in.Type)
}

// ResolveInputs checks given inputs against the declaration: unknown names
// and missing required inputs are errors; defaults fill the rest.
func (sk *Skill) ResolveInputs(given map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(sk.Inputs))
	declared := map[string]Input{}
	var problems []string
	for _, in := range sk.Inputs {
		declared[in.Name] = in
	}
	for k, v := range given {
		in, ok := declared[k]
		if !ok {
			names := make([]string, len(sk.Inputs))
			for i, in := range sk.Inputs {
				names[i] = in.Name
			}
			problems = append(problems, fmt.Sprintf("unknown input %q (inputs: %s)%s", k, strings.Join(names, ", "), textutil.Hint(k, names)))
			continue
		}
		c, err := CoerceInput(in, v)
		if err != nil {
			problems = append(problems, fmt.Sprintf("input %s: %v", k, err))
			continue
		}
		out[k] = c
	}
	for _, in := range sk.Inputs {
		if _, ok := out[in.Name]; ok {
			continue
		}
		switch {
		case in.HasDefault:
			c, _ := CoerceInput(in, in.Default)
			out[in.Name] = c
		case in.Required:
			problems = append(problems, fmt.Sprintf("missing required input %q", in.Name))
		default:
			out[in.Name] = nil
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return out, nil
}

var (
	yamlLineRE     = regexp.MustCompile(`line (\d+)`)
	yamlLinePartRE = regexp.MustCompile(`line \d+: `)
)

func yamlErrLine(err error) int {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

func cleanYAMLError(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	return yamlLinePartRE.ReplaceAllString(s, "")
}
