package skill

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/types"
	"github.com/expr-lang/expr/vm"
	"github.com/heedhq/heed/lib/textutil"
)

// Expr is one compiled expression (expr-lang/expr) and where it came from.
type Expr struct {
	Src  string
	Pos  Pos
	prog *vm.Program
}

// Eval runs the expression against env, within its budget (budget.go):
// an expression that would build too much, run too long or compute a
// number JSON cannot hold fails with an error instead.
func (e *Expr) Eval(env map[string]any) (any, error) {
	scoped := make(map[string]any, len(env)+1)
	for k, v := range env {
		scoped[k] = v
	}
	scoped[budgetName] = newBudget()
	machine := vm.VM{MemoryBudget: exprMemoryBudget}
	out, err := machine.Run(e.prog, scoped)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Src, cleanExprError(err))
	}
	if err := finite(out); err != nil {
		return nil, fmt.Errorf("%s: %w", e.Src, err)
	}
	return out, nil
}

// Template is a string with {{ expr }} parts. A template that is exactly one
// {{ expr }} renders to the expression's value with its type (a number stays
// a number); otherwise it renders to a string.
type Template struct {
	Src   string
	Pos   Pos
	parts []templatePart
}

type templatePart struct {
	lit  string
	expr *Expr
}

// Static reports whether the template has no expressions.
func (t *Template) Static() bool {
	for _, p := range t.parts {
		if p.expr != nil {
			return false
		}
	}
	return true
}

// Render evaluates the template against env.
func (t *Template) Render(env map[string]any) (any, error) {
	if len(t.parts) == 1 && t.parts[0].expr != nil {
		return t.parts[0].expr.Eval(env)
	}
	return t.join(env, false)
}

// join renders every part into one string; strict: an expression that
// gives nil is a NoValueError.
func (t *Template) join(env map[string]any, strict bool) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.expr == nil {
			b.WriteString(p.lit)
			continue
		}
		v, err := p.expr.Eval(env)
		if err != nil {
			return "", err
		}
		if v == nil && strict {
			return "", &NoValueError{Expr: strings.TrimSpace(p.expr.Src)}
		}
		b.WriteString(Stringify(v))
	}
	return b.String(), nil
}

// NoValueError is a template expression that gave nothing (nil): an
// argument the call does not have.
type NoValueError struct {
	Expr string // the expression's source, e.g. args.task
}

func (e *NoValueError) Error() string {
	return fmt.Sprintf("{{ %s }} has no value (give it, or write {{ %s ?? \"\" }} where it may be left out)", e.Expr, e.Expr)
}

// RenderArg renders the template to one string where every expression
// must give a value: an argv element, where an argument left out must
// not become an empty word silently (a tool run against task "").
func (t *Template) RenderArg(env map[string]any) (string, error) { return t.join(env, true) }

// RenderString renders and converts the result to a string.
func (t *Template) RenderString(env map[string]any) (string, error) {
	v, err := t.Render(env)
	if err != nil {
		return "", err
	}
	return Stringify(v), nil
}

// Stringify formats a value for text: strings as they are, numbers without
// exponent noise, nil as empty, everything else as JSON.
func Stringify(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	case fmt.Stringer:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Value is a templated YAML value: scalars are templates, maps and lists
// hold values. Used for tool args.
type Value struct {
	Tmpl *Template
	Lit  any // a non-string scalar (number, bool, null)
	Map  []MapEntry
	List []*Value
	Kind ValueKind
}

// ValueKind says which field of a Value is set.
type ValueKind int

const (
	ValueLiteral ValueKind = iota
	ValueTemplate
	ValueMap
	ValueList
)

// MapEntry is one key of a map Value, in file order.
type MapEntry struct {
	Key   string
	Value *Value
}

// Render evaluates every template in the value.
func (v *Value) Render(env map[string]any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch v.Kind {
	case ValueTemplate:
		return v.Tmpl.Render(env)
	case ValueMap:
		out := make(map[string]any, len(v.Map))
		for _, e := range v.Map {
			r, err := e.Value.Render(env)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.Key, err)
			}
			out[e.Key] = r
		}
		return out, nil
	case ValueList:
		out := make([]any, len(v.List))
		for i, e := range v.List {
			r, err := e.Render(env)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = r
		}
		return out, nil
	}
	return v.Lit, nil
}

// scope is what names an expression may use at one point of a skill.
type scope struct {
	vars   map[string]any // name → its type (a types.Type) for the checker
	inputs map[string]bool
	steps  []string // steps declared so far (steps.<name> is always known)
}

// env is the checker's view of the names: outputs bound by earlier steps
// are of any type; inputs are known by name; steps.<name> has status,
// output, error and attempt.
func (s scope) env() types.Map {
	env := types.Map{budgetName: types.Any}
	for k, v := range s.vars {
		if t, ok := v.(types.Type); ok {
			env[k] = t
		} else {
			env[k] = types.Any
		}
	}
	in := types.Map{types.Extra: types.Any}
	for k := range s.inputs {
		in[k] = types.Any
	}
	if _, ok := s.vars["inputs"]; ok {
		env["inputs"] = in
	}
	if _, ok := s.vars["steps"]; ok {
		st := types.Map{types.Extra: types.Any}
		entry := types.Map{"status": types.String, "output": types.Any, "error": types.Any, "attempt": types.Any}
		for _, n := range s.steps {
			st[n] = entry
		}
		env["steps"] = st
	}
	if _, ok := s.vars["run"]; ok {
		env["run"] = types.Map{"id": types.String, "skill": types.String, "step": types.String, "attempt": types.Any, "idempotency_key": types.String}
	}
	return env
}

// compiler turns expression sources into programs and collects lint errors.
type compiler struct {
	file string
	errs *Errors
}

func (c *compiler) expr(src string, pos Pos, sc scope, what string) *Expr {
	src = strings.TrimSpace(src)
	if src == "" {
		c.errs.add(pos, "%s: empty expression", what)
		return nil
	}
	if err := checkSource(src); err != nil {
		c.errs.add(pos, "%s: %v", what, err)
		return nil
	}
	prog, err := expr.Compile(src, append([]expr.Option{expr.Env(sc.env())}, budgetOptions()...)...)
	if err != nil {
		c.errs.add(exprPos(pos, err), "%s: %s", what, describeExprError(err, sc))
		return nil
	}
	// expr cannot see inside the inputs map: check inputs.<name> ourselves.
	var unknown []string
	ast.Walk(ptr(prog.Node()), visitor(func(n *ast.Node) {
		m, ok := (*n).(*ast.MemberNode)
		if !ok {
			return
		}
		id, ok := m.Node.(*ast.IdentifierNode)
		if !ok || id.Value != "inputs" {
			return
		}
		if p, ok := m.Property.(*ast.StringNode); ok && !sc.inputs[p.Value] {
			unknown = append(unknown, p.Value)
		}
	}))
	for _, u := range unknown {
		c.errs.add(pos, "%s: unknown input %q (declared: %s)%s", what, u, keys(sc.inputs), textutil.Hint(u, strings.Split(keys(sc.inputs), ", ")))
	}
	if len(unknown) > 0 {
		return nil
	}
	return &Expr{Src: src, Pos: pos, prog: prog}
}

func ptr(n ast.Node) *ast.Node { return &n }

type visitor func(*ast.Node)

func (v visitor) Visit(n *ast.Node) { v(n) }

// template parses "text {{ expr }} text".
func (c *compiler) template(src string, pos Pos, sc scope, what string) *Template {
	t := &Template{Src: src, Pos: pos}
	rest := src
	offsetLines := 0
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if rest != "" {
				t.parts = append(t.parts, templatePart{lit: rest})
			}
			break
		}
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			c.errs.add(pos.plusLines(offsetLines+strings.Count(rest[:i], "\n")), "%s: unclosed {{ in template", what)
			return nil
		}
		if i > 0 {
			t.parts = append(t.parts, templatePart{lit: rest[:i]})
		}
		inner := rest[i+2 : i+j]
		ep := pos.plusLines(offsetLines + strings.Count(rest[:i], "\n"))
		e := c.expr(inner, ep, sc, what)
		if e == nil {
			t.parts = append(t.parts, templatePart{lit: ""})
			offsetLines += strings.Count(rest[:i+j+2], "\n")
			rest = rest[i+j+2:]
			continue
		}
		t.parts = append(t.parts, templatePart{expr: e})
		offsetLines += strings.Count(rest[:i+j+2], "\n")
		rest = rest[i+j+2:]
	}
	if len(t.parts) == 0 {
		t.parts = []templatePart{{lit: ""}}
	}
	return t
}

func exprPos(pos Pos, err error) Pos {
	var fe *file.Error
	if errors.As(err, &fe) && fe.Line > 1 {
		return pos.plusLines(fe.Line - 1)
	}
	return pos
}

// describeExprError keeps expr's message but adds what names exist.
func describeExprError(err error, sc scope) string {
	var fe *file.Error
	msg := err.Error()
	if errors.As(err, &fe) {
		msg = fe.Message
		if fe.Snippet != "" {
			first := strings.Split(strings.TrimSpace(fe.Snippet), "\n")[0]
			msg += " in `" + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(first), "|")) + "`"
		}
	}
	if strings.Contains(msg, "unknown name") {
		msg += " (known here: " + keys(mapKeys(sc.vars)) + ")"
	}
	return msg
}

func cleanExprError(err error) error {
	var fe *file.Error
	if errors.As(err, &fe) {
		if fe.Prev != nil {
			return fmt.Errorf("%s: %w", strings.TrimSuffix(fe.Message, ": "+fe.Prev.Error()), fe.Prev)
		}
		return errors.New(fe.Message)
	}
	return err
}

func mapKeys(m map[string]any) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func keys(m map[string]bool) string {
	if len(m) == 0 {
		return "none"
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// CompileTemplate compiles a standalone template (e.g. a tool's argv
// element) where names are the variables it may use.
func CompileTemplate(src string, pos Pos, names map[string]any) (*Template, error) {
	errs := &Errors{}
	c := &compiler{file: pos.File, errs: errs}
	vars := map[string]any{}
	for k := range names {
		vars[k] = types.Any
	}
	if _, ok := names["run"]; ok {
		vars["run"] = nil
	}
	t := c.template(src, pos, scope{vars: vars, inputs: map[string]bool{}}, "template")
	if err := errs.orNil(); err != nil {
		return nil, err
	}
	return t, nil
}

// FixPatchNames are the variables a learned fix's args patch may use: the
// failed call's args, its error text, its tool and the tool's cluster.
var FixPatchNames = map[string]any{"args": nil, "error": nil, "tool": nil, "cluster": nil}

// CheckArgsPatch compiles every template of a fix's args patch (a string
// value with {{ }}), so that a fix that could never apply is refused when
// it is taught or recorded, not when a run fails. The error lists every
// problem on one line.
func CheckArgsPatch(patch map[string]any) error {
	ks := make([]string, 0, len(patch))
	for k := range patch {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var problems []string
	for _, k := range ks {
		s, ok := patch[k].(string)
		if !ok || !strings.Contains(s, "{{") {
			continue
		}
		if _, err := CompileTemplate(s, Pos{File: "args_patch." + k}, FixPatchNames); err != nil {
			problems = append(problems, strings.ReplaceAll(err.Error(), "\n", "; "))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
