package skill

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm/runtime"
)

// Limits of expressions. A skill comes from anyone who can send
// heed.cmd.run.start, so an expression must not be able to take the runner
// down: every limit is checked before the work or the allocation it bounds.
const (
	// MaxExprSource bounds an expression's source, and MaxExprDepth its
	// nesting of (), [] and {}: both are checked before it is parsed.
	MaxExprSource = 16 << 10
	MaxExprDepth  = 64
	// MaxExprNodes bounds the syntax tree.
	MaxExprNodes = 10000
	// exprMemoryBudget bounds, per evaluation, the elements of every range,
	// array and map built (expr-lang's memory units): 250,000 in all.
	exprMemoryBudget = 250_000
	// MaxExprString bounds a string an expression builds; MaxExprBytes all
	// the strings one evaluation builds.
	MaxExprString = 64 << 10
	MaxExprBytes  = 1 << 20
	// MaxExprTime bounds one evaluation.
	MaxExprTime = 250 * time.Millisecond
)

// budgetName is the hidden variable through which budgeted operations
// reach the evaluation's budget.
const budgetName = "__heed_budget"

// ErrBudget is what an expression that exceeds a limit fails with.
var ErrBudget = errors.New("expression exceeds its budget")

// budget is one evaluation's account.
type budget struct {
	bytes    int
	deadline time.Time
}

func newBudget() *budget { return &budget{deadline: time.Now().Add(MaxExprTime)} }

// spend accounts for n bytes about to be built.
func (b *budget) spend(n int) error {
	if n > MaxExprString {
		return fmt.Errorf("%w: a string of %d bytes (the limit is %d)", ErrBudget, n, MaxExprString)
	}
	b.bytes += n
	if b.bytes > MaxExprBytes {
		return fmt.Errorf("%w: %d bytes of strings built (the limit is %d)", ErrBudget, b.bytes, MaxExprBytes)
	}
	if time.Now().After(b.deadline) {
		return fmt.Errorf("%w: ran longer than %s", ErrBudget, MaxExprTime)
	}
	return nil
}

// checkSource refuses an expression too long or nested too deeply to be
// parsed cheaply (the parser recurses once per level).
func checkSource(src string) error {
	if len(src) > MaxExprSource {
		return fmt.Errorf("the expression is %d bytes; the limit is %d", len(src), MaxExprSource)
	}
	depth, quote := 0, byte(0)
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '[' || c == '{':
			if depth++; depth > MaxExprDepth {
				return fmt.Errorf("the expression nests deeper than %d levels", MaxExprDepth)
			}
		case c == ')' || c == ']' || c == '}':
			depth--
		}
	}
	return nil
}

// budgetOptions are the compile options that make every expression run
// within its budget: +, - and * go through checked functions (strings are
// accounted, integers do not wrap around), and so do the builtins that
// allocate from their arguments (repeat, join, toJSON).
func budgetOptions() []expr.Option {
	return []expr.Option{
		expr.MaxNodes(MaxExprNodes),
		expr.Patch(budgetPatcher{}),
		expr.Function("__heed_arith", arith, new(func(any, string, any, any) any)),
		expr.Function("__heed_repeat", repeat, new(func(any, string, any) string)),
		expr.Function("__heed_join", join, new(func(any, []any) string), new(func(any, []any, string) string)),
		expr.Function("__heed_tojson", toJSON, new(func(any, any) string)),
	}
}

// budgetPatcher rewrites the tree before it is checked and compiled.
type budgetPatcher struct{}

func (budgetPatcher) Visit(node *ast.Node) {
	acct := &ast.IdentifierNode{Value: budgetName}
	switch n := (*node).(type) {
	case *ast.BinaryNode:
		switch n.Operator {
		case "+", "-", "*":
			ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: "__heed_arith"},
				Arguments: []ast.Node{acct, &ast.StringNode{Value: n.Operator}, n.Left, n.Right}})
		}
	case *ast.BuiltinNode:
		name := map[string]string{"repeat": "__heed_repeat", "join": "__heed_join", "toJSON": "__heed_tojson"}[n.Name]
		if name != "" {
			ast.Patch(node, &ast.CallNode{Callee: &ast.IdentifierNode{Value: name}, Arguments: append([]ast.Node{acct}, n.Arguments...)})
		}
	}
}

func account(v any) (*budget, error) {
	b, ok := v.(*budget)
	if !ok || b == nil {
		return nil, errors.New("expression evaluated without a budget")
	}
	return b, nil
}

// arith is +, - and * with the budget: a string concatenation is
// accounted before it is built, and integer arithmetic that would wrap
// around is an error instead of a wrong number.
func arith(params ...any) (any, error) {
	b, err := account(params[0])
	if err != nil {
		return nil, err
	}
	op, x, y := params[1].(string), params[2], params[3]
	if xs, ok := x.(string); ok && op == "+" {
		if ys, ok := y.(string); ok {
			if err := b.spend(len(xs) + len(ys)); err != nil {
				return nil, err
			}
			return xs + ys, nil
		}
	}
	if xi, ok := x.(int); ok {
		if yi, ok := y.(int); ok {
			return intArith(op, xi, yi)
		}
	}
	if time.Now().After(b.deadline) {
		return nil, fmt.Errorf("%w: ran longer than %s", ErrBudget, MaxExprTime)
	}
	switch op {
	case "+":
		return runtime.Add(x, y), nil
	case "-":
		return runtime.Subtract(x, y), nil
	}
	return runtime.Multiply(x, y), nil
}

func intArith(op string, x, y int) (any, error) {
	var r int
	ok := true
	switch op {
	case "+":
		r = x + y
		ok = (x >= 0) != (y >= 0) || (r >= 0) == (x >= 0)
	case "-":
		r = x - y
		ok = (x >= 0) == (y >= 0) || (r >= 0) == (x >= 0)
	case "*":
		r = x * y
		ok = x == 0 || (r/x == y && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64))
	}
	if !ok {
		return nil, fmt.Errorf("integer overflow: %d %s %d does not fit in 64 bits", x, op, y)
	}
	return r, nil
}

func repeat(params ...any) (any, error) {
	b, err := account(params[0])
	if err != nil {
		return nil, err
	}
	s, n := params[1].(string), runtime.ToInt(params[2])
	if n < 0 {
		return nil, fmt.Errorf("repeat: a negative count %d", n)
	}
	if len(s) > 0 && n > MaxExprString/len(s)+1 {
		return nil, fmt.Errorf("%w: repeat would build %d × %d bytes (the limit is %d)", ErrBudget, n, len(s), MaxExprString)
	}
	if err := b.spend(len(s) * n); err != nil {
		return nil, err
	}
	return strings.Repeat(s, n), nil
}

func join(params ...any) (any, error) {
	b, err := account(params[0])
	if err != nil {
		return nil, err
	}
	items, _ := params[1].([]any)
	sep := ""
	if len(params) > 2 {
		sep, _ = params[2].(string)
	}
	size := len(sep) * max(len(items)-1, 0)
	parts := make([]string, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, fmt.Errorf("join: element %d is %T, not a string", i, it)
		}
		parts[i] = s
		if size += len(s); size > MaxExprString {
			return nil, fmt.Errorf("%w: join would build more than %d bytes", ErrBudget, MaxExprString)
		}
	}
	if err := b.spend(size); err != nil {
		return nil, err
	}
	return strings.Join(parts, sep), nil
}

func toJSON(params ...any) (any, error) {
	b, err := account(params[0])
	if err != nil {
		return nil, err
	}
	// Measure before building: the value may repeat a large string many
	// times.
	if n := approxJSONSize(params[1], MaxExprString+1); n > MaxExprString {
		return nil, fmt.Errorf("%w: toJSON would build more than %d bytes", ErrBudget, MaxExprString)
	}
	out, err := builtin.Builtins[builtinIndex("toJSON")].Func(params[1])
	if err != nil {
		return nil, err
	}
	s, _ := out.(string)
	if err := b.spend(len(s)); err != nil {
		return nil, err
	}
	return s, nil
}

func builtinIndex(name string) int {
	for i, f := range builtin.Builtins {
		if f.Name == name {
			return i
		}
	}
	panic("expr has no builtin " + name)
}

// approxJSONSize is a lower bound of v's JSON size, counted up to limit.
func approxJSONSize(v any, limit int) int {
	n := 0
	var walk func(any)
	walk = func(v any) {
		if n > limit {
			return
		}
		switch x := v.(type) {
		case string:
			n += len(x) + 2
		case []any:
			n += 2
			for _, e := range x {
				walk(e)
				n++
			}
		case map[string]any:
			n += 2
			for k, e := range x {
				n += len(k) + 4
				walk(e)
			}
		default:
			n += 4
		}
	}
	walk(v)
	return n
}

// finite refuses a value JSON cannot hold: a division by zero gives an
// infinity, 0/0 NaN.
func finite(v any) error {
	switch x := v.(type) {
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Errorf("the result %v is not a finite number (a division by zero?)", x)
		}
	case []any:
		for _, e := range x {
			if err := finite(e); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, e := range x {
			if err := finite(e); err != nil {
				return err
			}
		}
	}
	return nil
}
