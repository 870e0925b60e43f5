// Package schemacheck validates JSON documents against compiled JSON
// Schemas in two stages. A fast acceptor (Fast), compiled from the same
// schema, reads the bytes once without allocating and can only say
// "valid": it accepts a strict subset of what encoding/json plus the
// jsonschema validator accept. Whatever it does not accept goes through
// Full (encoding/json, then jsonschema), which alone decides refusals and
// words every problem. heed's events package builds its Validator on it.
package schemacheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Fast is the fast acceptor of one schema.
type Fast struct{ n *fastNode }

// CompileFast compiles the fast acceptor of s, or says which feature of
// the schema it does not handle (then validate with Full only).
func CompileFast(s *jsonschema.Schema) (*Fast, error) {
	n, err := newFastCompiler().compile(s)
	if err != nil {
		return nil, err
	}
	return &Fast{n: n}, nil
}

// Accepts reports whether data is certainly valid. false means: ask Full.
func (f *Fast) Accepts(data []byte) bool { return f.n.accepts(data) }

// The fast stage. A fastNode is the conjunction of one or more compiled
// schemas (a schema and the schemas its $ref chain points to), merged so
// that one pass over the JSON bytes can check a value against all of them.
// Supported keywords: type; enum and format (checked on strings only);
// properties, required, additionalProperties; items (2020-12), minItems,
// maxItems; minLength, maxLength, pattern; minimum, maximum,
// exclusiveMinimum, exclusiveMaximum with integer bounds; uniqueItems
// (arrays of distinct plain strings; anything else is left to Full);
// boolean schemas and $ref. A schema using anything else gets no fast
// stage at all.

// JSON kinds, as bits of fastNode.kinds.
const (
	kindNull uint8 = 1 << iota
	kindBool
	kindObject
	kindArray
	kindString
	kindNumber
	kindAll = kindNull | kindBool | kindObject | kindArray | kindString | kindNumber
)

// fastMaxDepth bounds nesting; deeper data takes the full path (encoding/json
// itself stops at 10000).
const fastMaxDepth = 512

type fastNode struct {
	never   bool  // a false schema is among the conjuncts
	kinds   uint8 // kinds every conjunct allows
	intOnly bool  // some conjunct allows "integer" but not "number"

	// strings
	minLen, maxLen int // -1: none
	patterns       []fastPattern
	formats        []func(any) bool
	enums          [][]any // each conjunct's enum: the value must be in every one
	needString     bool    // a string value's decoded text is needed

	// numbers: each bound is integral and fits comfortably in an int64
	bounds []fastBound

	// objects
	props    map[string]fastProp // every property named in properties or required
	other    *fastNode           // any other property; nil: not allowed
	required uint64              // bits of the required properties

	// arrays
	items              *fastNode // never nil
	minItems, maxItems int       // -1: none
	unique             bool      // uniqueItems
}

type fastProp struct {
	node *fastNode // nil: not allowed
	bit  uint64    // 0 unless required
}

type fastBound struct {
	v       int64
	op      int8 // the comparison of value with v that must hold: -1 (<), 1 (>), 0 with orEqual (==)
	orEqual bool
}

// fastCompiler compiles one schema. Use a new one for each: after an error
// its memo holds unfinished nodes, which must never be reused.
type fastCompiler struct {
	memo map[string]*fastNode
}

func newFastCompiler() *fastCompiler { return &fastCompiler{memo: map[string]*fastNode{}} }

// compile returns the fast node of s, or an error naming the first feature
// it does not handle.
func (fc *fastCompiler) compile(s *jsonschema.Schema) (*fastNode, error) {
	return fc.node([]*jsonschema.Schema{s})
}

// node builds the conjunction of the given schemas and their $ref chains.
func (fc *fastCompiler) node(list []*jsonschema.Schema) (*fastNode, error) {
	var atoms []*jsonschema.Schema
	for _, s := range list {
		seen := map[*jsonschema.Schema]bool{}
		for ; s != nil; s = s.Ref {
			if seen[s] {
				return nil, fmt.Errorf("%s: $ref cycle", s.Location)
			}
			seen[s] = true
			if !slices.Contains(atoms, s) {
				atoms = append(atoms, s)
			}
		}
	}
	keys := make([]string, len(atoms))
	for i, a := range atoms {
		keys[i] = fmt.Sprintf("%p", a)
	}
	slices.Sort(keys)
	key := strings.Join(keys, ",")
	if n, ok := fc.memo[key]; ok {
		return n, nil
	}
	n := &fastNode{kinds: kindAll, minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
	fc.memo[key] = n // before the children: schemas may be recursive

	var itemSchemas []*jsonschema.Schema
	propNames := map[string]bool{}
	var required []string
	for _, a := range atoms {
		if err := fastSupported(a); err != nil {
			return nil, err
		}
		if a.Always != nil && !*a.Always {
			n.never = true
		}
		if len(a.Types) > 0 {
			var k uint8
			hasNumber, hasInteger := false, false
			for _, t := range a.Types {
				switch t {
				case "null":
					k |= kindNull
				case "boolean":
					k |= kindBool
				case "object":
					k |= kindObject
				case "array":
					k |= kindArray
				case "string":
					k |= kindString
				case "number":
					k |= kindNumber
					hasNumber = true
				case "integer":
					k |= kindNumber
					hasInteger = true
				default:
					return nil, fmt.Errorf("%s: type %q", a.Location, t)
				}
			}
			n.kinds &= k
			if hasInteger && !hasNumber {
				n.intOnly = true
			}
		}
		if len(a.Enum) > 0 {
			n.enums = append(n.enums, a.Enum)
			n.needString = true
		}
		if a.Format != "" {
			if f := jsonschema.Formats[a.Format]; f != nil {
				n.formats = append(n.formats, f)
				n.needString = true
			}
		}
		if a.MinLength != -1 {
			n.minLen = max(n.minLen, a.MinLength)
			n.needString = true
		}
		if a.MaxLength != -1 {
			if n.maxLen == -1 || a.MaxLength < n.maxLen {
				n.maxLen = a.MaxLength
			}
			n.needString = true
		}
		if a.Pattern != nil {
			n.patterns = append(n.patterns, fastPattern{re: a.Pattern, ascii: compileASCIIPattern(a.Pattern)})
			n.needString = true
		}
		for _, b := range []struct {
			r       *big.Rat
			op      int8
			orEqual bool
		}{{a.Minimum, 1, true}, {a.ExclusiveMinimum, 1, false}, {a.Maximum, -1, true}, {a.ExclusiveMaximum, -1, false}} {
			if b.r == nil {
				continue
			}
			const limit = 1 << 62
			if !b.r.IsInt() || !b.r.Num().IsInt64() || b.r.Num().Int64() <= -limit || b.r.Num().Int64() >= limit {
				return nil, fmt.Errorf("%s: bound %s", a.Location, b.r.RatString())
			}
			n.bounds = append(n.bounds, fastBound{v: b.r.Num().Int64(), op: b.op, orEqual: b.orEqual})
		}
		if a.MinItems != -1 {
			n.minItems = max(n.minItems, a.MinItems)
		}
		if a.MaxItems != -1 {
			if n.maxItems == -1 || a.MaxItems < n.maxItems {
				n.maxItems = a.MaxItems
			}
		}
		if a.Items2020 != nil {
			itemSchemas = append(itemSchemas, a.Items2020)
		}
		if a.UniqueItems {
			n.unique = true
		}
		for name := range a.Properties {
			propNames[name] = true
		}
		required = append(required, a.Required...)
	}

	// What applies to a property of a given name; the empty name stands for
	// every name no conjunct lists.
	propNode := func(name string, listed bool) (*fastNode, error) {
		var set []*jsonschema.Schema
		for _, a := range atoms {
			if s, ok := a.Properties[name]; ok && listed {
				set = append(set, s)
				continue
			}
			switch ap := a.AdditionalProperties.(type) {
			case bool:
				if !ap {
					return nil, nil
				}
			case *jsonschema.Schema:
				set = append(set, ap)
			}
		}
		return fc.node(set)
	}
	var err error
	if n.other, err = propNode("", false); err != nil {
		return nil, err
	}
	for _, name := range required {
		propNames[name] = true
	}
	n.props = make(map[string]fastProp, len(propNames))
	for name := range propNames {
		pn, err := propNode(name, true)
		if err != nil {
			return nil, err
		}
		n.props[name] = fastProp{node: pn}
	}
	slices.Sort(required)
	required = slices.Compact(required)
	if len(required) > 64 {
		return nil, errors.New("more than 64 required properties")
	}
	for i, name := range required {
		p := n.props[name]
		p.bit = 1 << i
		n.props[name] = p
		n.required |= p.bit
	}
	if n.items, err = fc.node(itemSchemas); err != nil {
		return nil, err
	}
	return n, nil
}

// fastSupported reports the first keyword of s the fast stage does not
// handle.
func fastSupported(s *jsonschema.Schema) error {
	var kw string
	switch {
	case s.RecursiveRef != nil:
		kw = "$recursiveRef"
	case s.DynamicRef != nil:
		kw = "$dynamicRef"
	case len(s.Constant) > 0:
		kw = "const"
	case s.Not != nil:
		kw = "not"
	case len(s.AllOf) > 0:
		kw = "allOf"
	case len(s.AnyOf) > 0:
		kw = "anyOf"
	case len(s.OneOf) > 0:
		kw = "oneOf"
	case s.If != nil:
		kw = "if"
	case s.MinProperties != -1:
		kw = "minProperties"
	case s.MaxProperties != -1:
		kw = "maxProperties"
	case s.PropertyNames != nil:
		kw = "propertyNames"
	case s.RegexProperties:
		kw = "regexProperties"
	case len(s.PatternProperties) > 0:
		kw = "patternProperties"
	case len(s.Dependencies) > 0:
		kw = "dependencies"
	case len(s.DependentRequired) > 0:
		kw = "dependentRequired"
	case len(s.DependentSchemas) > 0:
		kw = "dependentSchemas"
	case s.UnevaluatedProperties != nil:
		kw = "unevaluatedProperties"
	case s.Items != nil:
		kw = "items (array form)"
	case s.AdditionalItems != nil:
		kw = "additionalItems"
	case len(s.PrefixItems) > 0:
		kw = "prefixItems"
	case s.Contains != nil:
		kw = "contains"
	case s.UnevaluatedItems != nil:
		kw = "unevaluatedItems"
	case s.ContentEncoding != "":
		kw = "contentEncoding"
	case s.ContentMediaType != "":
		kw = "contentMediaType"
	case s.ContentSchema != nil:
		kw = "contentSchema"
	case s.MultipleOf != nil:
		kw = "multipleOf"
	case len(s.Extensions) > 0:
		kw = "extension keywords"
	default:
		return nil
	}
	return fmt.Errorf("%s: %s", s.Location, kw)
}

// accepts reports whether data is exactly one JSON value (and white space)
// that satisfies n. False means "not proven", not "invalid".
func (n *fastNode) accepts(data []byte) bool {
	p := fastParser{data: data}
	p.skipSpace()
	if !p.value(n) {
		return false
	}
	p.skipSpace()
	return p.pos == len(p.data)
}

type fastParser struct {
	data  []byte
	pos   int
	depth int
}

func (p *fastParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *fastParser) literal(lit string) bool {
	if len(p.data)-p.pos < len(lit) || string(p.data[p.pos:p.pos+len(lit)]) != lit {
		return false
	}
	p.pos += len(lit)
	return true
}

func (p *fastParser) value(n *fastNode) bool {
	if n == nil || n.never || p.pos >= len(p.data) {
		return false
	}
	switch c := p.data[p.pos]; c {
	case '"':
		return n.kinds&kindString != 0 && p.stringValue(n)
	case '{':
		return n.kinds&kindObject != 0 && n.onlyStringChecks() && p.object(n)
	case '[':
		return n.kinds&kindArray != 0 && n.onlyStringChecks() && p.array(n)
	case 't':
		return n.kinds&kindBool != 0 && n.onlyStringChecks() && p.literal("true")
	case 'f':
		return n.kinds&kindBool != 0 && n.onlyStringChecks() && p.literal("false")
	case 'n':
		return n.kinds&kindNull != 0 && n.onlyStringChecks() && p.literal("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return n.kinds&kindNumber != 0 && n.onlyStringChecks() && p.number(n)
		}
		return false
	}
}

// onlyStringChecks reports whether n has no enum and no format, the two
// keywords the fast stage checks on strings only. Other values under either
// are left to the full path.
func (n *fastNode) onlyStringChecks() bool {
	return len(n.enums) == 0 && len(n.formats) == 0
}

func (p *fastParser) object(n *fastNode) bool {
	if p.depth++; p.depth > fastMaxDepth {
		return false
	}
	p.pos++ // {
	var seen uint64
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
	} else {
		for {
			if p.pos >= len(p.data) || p.data[p.pos] != '"' {
				return false
			}
			raw, ok := p.scanString()
			if !ok {
				return false
			}
			child := n.other
			if name, ok := p.text(raw); !ok {
				return false
			} else if prop, ok := n.props[string(name)]; ok {
				child = prop.node
				seen |= prop.bit
			}
			p.skipSpace()
			if p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return false
			}
			p.pos++
			p.skipSpace()
			if !p.value(child) {
				return false
			}
			more, ok := p.separator('}')
			if !ok {
				return false
			}
			if !more {
				break
			}
		}
	}
	p.depth--
	return seen&n.required == n.required
}

// separator reads what follows a member or element: ',' (more follow) or
// the closer (the container ends). Anything else is not accepted.
func (p *fastParser) separator(closer byte) (more, ok bool) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return false, false
	}
	switch p.data[p.pos] {
	case ',':
		p.pos++
		p.skipSpace()
		return true, true
	case closer:
		p.pos++
		return false, true
	}
	return false, false
}

func (p *fastParser) array(n *fastNode) bool {
	if p.depth++; p.depth > fastMaxDepth {
		return false
	}
	p.pos++ // [
	count := 0
	// uniqueItems: the elements' raw bytes, compared once the array is
	// read (strings only, see distinctStrings).
	var elems [][2]int
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
	} else {
		for {
			start := p.pos
			if !p.value(n.items) {
				return false
			}
			if n.unique {
				elems = append(elems, [2]int{start, p.pos})
			}
			count++
			more, ok := p.separator(']')
			if !ok {
				return false
			}
			if !more {
				break
			}
		}
	}
	p.depth--
	if n.unique && count > 1 && !p.distinctStrings(elems) {
		return false
	}
	return (n.minItems == -1 || count >= n.minItems) && (n.maxItems == -1 || count <= n.maxItems)
}

// distinctStrings reports whether the elements are strings, pairwise
// different. Strings without escapes are equal exactly when their bytes
// are; with an escape anywhere, they are decoded and compared as text.
// Anything but strings (numbers, objects: equal values can be spelled
// differently) is left to the full path.
func (p *fastParser) distinctStrings(elems [][2]int) bool {
	if len(elems) > 128 {
		return false
	}
	escaped := false
	for _, e := range elems {
		raw := p.data[e[0]:e[1]]
		if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
			return false
		}
		escaped = escaped || bytes.IndexByte(raw, '\\') >= 0
	}
	if escaped {
		seen := make(map[string]bool, len(elems))
		for _, e := range elems {
			var s string
			if json.Unmarshal(p.data[e[0]:e[1]], &s) != nil || seen[s] {
				return false
			}
			seen[s] = true
		}
		return true
	}
	for i, e := range elems {
		for _, f := range elems[:i] {
			if bytes.Equal(p.data[e[0]:e[1]], p.data[f[0]:f[1]]) {
				return false
			}
		}
	}
	return true
}

// plainStringByte marks the bytes that may appear in a JSON string as
// themselves: everything but '"', '\\' and control characters.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString moves past the string at p.pos and returns it with its quotes,
// or false if it is not a JSON string as encoding/json's scanner defines it.
func (p *fastParser) scanString() ([]byte, bool) {
	start := p.pos
	i := p.pos + 1
	for i < len(p.data) {
		c := p.data[i]
		if plainStringByte[c] {
			i++
			continue
		}
		switch c {
		case '"':
			p.pos = i + 1
			return p.data[start:p.pos], true
		case '\\':
			if i+1 >= len(p.data) {
				return nil, false
			}
			switch p.data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(p.data) {
					return nil, false
				}
				for _, h := range p.data[i+2 : i+6] {
					if _, ok := unhex(h); !ok {
						return nil, false
					}
				}
				i += 6
			default:
				return nil, false
			}
		default: // a control character
			return nil, false
		}
	}
	return nil, false
}

// text is the string encoding/json decodes from raw (a scanned string with
// its quotes): the bytes between the quotes when they hold no escape and
// are valid UTF-8 (no copy), otherwise what encoding/json itself decodes.
func (p *fastParser) text(raw []byte) ([]byte, bool) {
	inner := raw[1 : len(raw)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain || bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner, true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, false
	}
	return []byte(s), true
}

func (p *fastParser) stringValue(n *fastNode) bool {
	raw, ok := p.scanString()
	if !ok {
		return false
	}
	if !n.needString {
		return true
	}
	b, ok := p.text(raw)
	if !ok {
		return false
	}
	if n.minLen != -1 || n.maxLen != -1 {
		l := utf8.RuneCount(b)
		if n.minLen != -1 && l < n.minLen || n.maxLen != -1 && l > n.maxLen {
			return false
		}
	}
	for _, p := range n.patterns {
		if !p.match(b) {
			return false
		}
	}
	for _, f := range n.formats {
		if !f(string(b)) {
			return false
		}
	}
	for _, enum := range n.enums {
		if !slices.ContainsFunc(enum, func(v any) bool { s, ok := v.(string); return ok && s == string(b) }) {
			return false
		}
	}
	return true
}

// number checks the number at p.pos against n's type and bounds; numbers
// with an exponent, or too many digits to compare, are left to the full path
// when a bound or "integer" applies to them.
func (p *fastParser) number(n *fastNode) bool {
	i := p.pos
	neg := false
	if p.data[i] == '-' {
		neg = true
		i++
	}
	intStart := i
	switch {
	case i < len(p.data) && p.data[i] == '0':
		i++
	case i < len(p.data) && p.data[i] >= '1' && p.data[i] <= '9':
		for i < len(p.data) && p.data[i] >= '0' && p.data[i] <= '9' {
			i++
		}
	default:
		return false
	}
	intDigits := p.data[intStart:i]
	fracNonZero := false
	if i < len(p.data) && p.data[i] == '.' {
		i++
		start := i
		for i < len(p.data) && p.data[i] >= '0' && p.data[i] <= '9' {
			if p.data[i] != '0' {
				fracNonZero = true
			}
			i++
		}
		if i == start {
			return false
		}
	}
	hasExp := false
	if i < len(p.data) && (p.data[i] == 'e' || p.data[i] == 'E') {
		hasExp = true
		i++
		if i < len(p.data) && (p.data[i] == '+' || p.data[i] == '-') {
			i++
		}
		start := i
		for i < len(p.data) && p.data[i] >= '0' && p.data[i] <= '9' {
			i++
		}
		if i == start {
			return false
		}
	}
	p.pos = i
	// Exponents and very long numbers go to the full path, which refuses
	// what a float64 cannot hold.
	if hasExp || i-intStart > 64 {
		return false
	}
	if !n.intOnly && len(n.bounds) == 0 {
		return true
	}
	if len(intDigits) > 18 {
		return false
	}
	if n.intOnly && fracNonZero {
		return false
	}
	var whole int64
	for _, c := range intDigits {
		whole = whole*10 + int64(c-'0')
	}
	for _, b := range n.bounds {
		c := cmpDecimal(neg, whole, fracNonZero, b.v)
		if !(c == int(b.op) || b.orEqual && c == 0) {
			return false
		}
	}
	return true
}

// cmpDecimal compares the decimal ±(whole + frac), where frac is in [0, 1)
// and nonzero exactly when fracNonZero, with the integer b (|b| < 2^62).
func cmpDecimal(neg bool, whole int64, fracNonZero bool, b int64) int {
	if neg && (whole != 0 || fracNonZero) {
		return -cmpDecimal(false, whole, fracNonZero, -b)
	}
	switch {
	case whole > b:
		return 1
	case whole < b:
		return -1
	case fracNonZero:
		return 1
	}
	return 0
}

// fastPattern is a schema's pattern; ascii, when the pattern has its shape,
// matches without the regexp engine.
type fastPattern struct {
	re    *regexp.Regexp
	ascii *asciiPattern
}

func (p fastPattern) match(b []byte) bool {
	if p.ascii != nil {
		return p.ascii.match(b)
	}
	return p.re.Match(b)
}

// asciiPattern is a regexp of the form ^item...item$ where each item is an
// ASCII character or class, repeated a fixed number of times, except that the
// last one may have a range of counts: ^[A-Za-z_][A-Za-z0-9_.-]{0,127}$ or
// ^sha256:[0-9a-f]{64}$. Anchored at both ends, with only the last item of
// variable length, matching byte by byte gives what the regexp gives: every
// byte of a non-ASCII rune, or of invalid UTF-8, is outside every class, as
// is the rune the regexp decodes from it.
type asciiPattern struct {
	items []asciiItem
}

type asciiItem struct {
	set      [2]uint64 // bit c%64 of set[c/64]: ASCII byte c is in the class
	min, max int       // repetitions; max -1: unbounded
}

func (it *asciiItem) has(c byte) bool { return c < 128 && it.set[c>>6]&(1<<(c&63)) != 0 }

func (p *asciiPattern) match(b []byte) bool {
	i := 0
	for _, it := range p.items {
		if it.min != it.max { // the last item
			n := len(b) - i
			if n < it.min || it.max >= 0 && n > it.max {
				return false
			}
			for ; i < len(b); i++ {
				if !it.has(b[i]) {
					return false
				}
			}
			return true
		}
		for range it.min {
			if i >= len(b) || !it.has(b[i]) {
				return false
			}
			i++
		}
	}
	return i == len(b)
}

// compileASCIIPattern returns the asciiPattern of re, or nil if re does not
// have that shape.
func compileASCIIPattern(re *regexp.Regexp) *asciiPattern {
	// regexp.Compile parses with syntax.Perl; so does this.
	rx, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	nodes := []*syntax.Regexp{rx}
	if rx.Op == syntax.OpConcat {
		nodes = rx.Sub
	}
	if len(nodes) < 2 || nodes[0].Op != syntax.OpBeginText || nodes[len(nodes)-1].Op != syntax.OpEndText {
		return nil
	}
	class := func(n *syntax.Regexp) (it asciiItem, ok bool) {
		if n.Flags&syntax.FoldCase != 0 {
			return it, false
		}
		switch {
		case n.Op == syntax.OpLiteral && len(n.Rune) == 1:
			if n.Rune[0] >= utf8.RuneSelf {
				return it, false
			}
			it.set[n.Rune[0]>>6] |= 1 << (n.Rune[0] & 63)
		case n.Op == syntax.OpCharClass:
			for i := 0; i+1 < len(n.Rune); i += 2 {
				if n.Rune[i+1] >= utf8.RuneSelf {
					return it, false
				}
				for r := n.Rune[i]; r <= n.Rune[i+1]; r++ {
					it.set[r>>6] |= 1 << (r & 63)
				}
			}
		default:
			return it, false
		}
		return it, true
	}
	p := &asciiPattern{}
	for _, n := range nodes[1 : len(nodes)-1] {
		if n.Flags&syntax.FoldCase != 0 {
			return nil
		}
		switch n.Op {
		case syntax.OpLiteral:
			for _, r := range n.Rune {
				it, ok := class(&syntax.Regexp{Op: syntax.OpLiteral, Rune: []rune{r}})
				if !ok {
					return nil
				}
				it.min, it.max = 1, 1
				p.items = append(p.items, it)
			}
		case syntax.OpCharClass:
			it, ok := class(n)
			if !ok {
				return nil
			}
			it.min, it.max = 1, 1
			p.items = append(p.items, it)
		case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
			if len(n.Sub) != 1 {
				return nil
			}
			it, ok := class(n.Sub[0])
			if !ok {
				return nil
			}
			switch n.Op {
			case syntax.OpStar:
				it.min, it.max = 0, -1
			case syntax.OpPlus:
				it.min, it.max = 1, -1
			case syntax.OpQuest:
				it.min, it.max = 0, 1
			default:
				it.min, it.max = n.Min, n.Max
			}
			p.items = append(p.items, it)
		default:
			return nil
		}
	}
	for i, it := range p.items {
		if it.min != it.max && i != len(p.items)-1 {
			return nil
		}
	}
	return p
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
