package schemacheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/heedhq/heed/schemas"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// The fast stage of Validator may only ever say "valid" when the full path
// (encoding/json + jsonschema) says so too. These tests check that on the
// catalog's schemas and on synthetic ones that use every keyword it merges,
// with documents built from the schemas, random ones and mutated ones.

// checkSound fails the test if the fast stage accepts data that the full
// path refuses, and reports whether each accepted it.
func checkSound(t testing.TB, label string, n *fastNode, s *jsonschema.Schema, data []byte) (fast, full bool) {
	t.Helper()
	if len(data) == 0 {
		data = []byte("null")
	}
	fast = n.accepts(data)
	err, panicked := fullPath(s, data)
	if fast && (err != nil || panicked) {
		t.Errorf("%s: fast stage accepted %q, the full path refuses it: %v (panic: %v)", label, data, err, panicked)
	}
	return fast, err == nil && !panicked
}

// fullPath runs validateFull. jsonschema v5 panics on a number whose
// exponent big.Rat cannot hold (1e999999999) when a bound applies to it;
// that counts as a refusal here.
func fullPath(s *jsonschema.Schema, data []byte) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			panicked = true
		}
	}()
	if p := Full(s, "data", data); p != nil {
		return p, false
	}
	return nil, false
}

// testCatalog is heed's event schemas, compiled as the events package
// compiles them.
type testCatalog struct {
	names  []string
	byType map[string]*jsonschema.Schema
	fast   map[string]*fastNode
}

func loadCatalog(t testing.TB) *testCatalog {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	fsys := schemas.FS()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		return c.AddResource(schemas.BaseURL+path, bytes.NewReader(b))
	})
	if err != nil {
		t.Fatal(err)
	}
	v := &testCatalog{byType: map[string]*jsonschema.Schema{}, fast: map[string]*fastNode{}}
	for _, name := range schemas.EventTypes() {
		s, err := c.Compile(schemas.BaseURL + schemas.EventSchemaPath(name))
		if err != nil {
			t.Fatal(err)
		}
		v.names = append(v.names, name)
		v.byType[name] = s
		if n, err := newFastCompiler().compile(s); err == nil {
			v.fast[name] = n
		}
	}
	// Commands' requests go through the same two stages.
	for _, subject := range schemas.Commands() {
		s, err := c.Compile(schemas.BaseURL + schemas.CommandSchemaPath(subject))
		if err != nil {
			t.Fatal(err)
		}
		name := "command " + subject
		v.names = append(v.names, name)
		v.byType[name] = s
		if n, err := newFastCompiler().compile(s); err == nil {
			v.fast[name] = n
		}
	}
	return v
}

const runStepCompleted = "heed.run.step.completed"

func TestFastStageCompilesCatalog(t *testing.T) {
	v := loadCatalog(t)
	for _, name := range v.names {
		if _, err := newFastCompiler().compile(v.byType[name]); err != nil {
			// Not an error: such a type is validated by the full path only.
			t.Logf("%s: full path only (%v)", name, err)
		}
	}
}

func TestFastStageOnCatalog(t *testing.T) {
	v := loadCatalog(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range v.names {
		n := v.fast[name]
		if n == nil {
			continue
		}
		s := v.byType[name]
		var fastOK, fullOK int
		var declined []string
		for i := range 600 {
			var doc any
			if i%3 == 0 {
				doc = randomValue(rng, 3)
			} else {
				doc = fromSchema(rng, s, 4)
			}
			data, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			fast, full := checkSound(t, name, n, s, data)
			if fast {
				fastOK++
			} else if full && ordinaryNumbers(data) {
				declined = append(declined, string(data))
			}
			if full {
				fullOK++
				for range 3 {
					checkSound(t, name+" mutated", n, s, mutate(rng, data))
				}
			}
		}
		t.Logf("%s: full path accepts %d, fast stage %d", name, fullOK, fastOK)
		if len(declined) > 0 {
			// Not wrong, but every such event pays for the full path.
			t.Errorf("%s: the fast stage declined valid documents with ordinary numbers, e.g. %s", name, declined[0])
		}
	}
}

func TestFastStageAcceptsTypicalEvent(t *testing.T) {
	v := loadCatalog(t)
	n := v.fast[runStepCompleted]
	if n == nil {
		t.Skip("heed.run.step.completed uses a keyword the fast stage does not handle")
	}
	for _, doc := range []string{
		`{"step":"deploy","index":3,"attempt":1,"output":"ok","duration_ms":12.5}`,
		` {"step":"deploy","index":0,"attempt":1,"output":{"a":[1,2,{"b":null}]},"output_truncated":false} `,
		`{"step":"x","index":3.0,"attempt":1e0,"output":"line\nline \u00e9 \ud83d\ude00"}`,
		`{"step":"x","index":3,"attempt":1,"step":"y"}`,
	} {
		fast, full := checkSound(t, "typical", n, v.byType[runStepCompleted], []byte(doc))
		if !full {
			t.Errorf("%s: not valid", doc)
		}
		if !fast && !strings.Contains(doc, "e0") {
			t.Errorf("%s: not accepted by the fast stage", doc)
		}
	}
	for _, doc := range []string{
		``, `null`, `{}`, `{"step":"deploy","index":3}`, `{"step":"deploy","index":-1,"attempt":1}`,
		`{"step":"deploy","index":3,"attempt":0}`, `{"step":"9x","index":3,"attempt":1}`,
		`{"step":"deploy","index":3.5,"attempt":1}`, `{"step":"deploy","index":3,"attempt":1,"extra":1}`,
		`{"step":"deploy","index":3,"attempt":1,"duration_ms":-0.001}`, `{"step":"deploy","index":3,"attempt":1} {}`,
		`{"step":"deploy","index":3,"attempt":1}}`, `{"step":"deploy","index":3,"attempt":1,}`,
		`{"step":"deploy","index":03,"attempt":1}`, `{"step":"de\ploy","index":3,"attempt":1}`,
		"{\"step\":\"de\tploy\",\"index\":3,\"attempt\":1}", `{"step":"deploy","index":3,"attempt":1,"output":"\x"}`,
		`{"step":"deploy","index":3,"attempt":1,"output_truncated":"no"}`, `[{"step":"deploy","index":3,"attempt":1}]`,
	} {
		fast, _ := checkSound(t, "invalid", n, v.byType[runStepCompleted], []byte(doc))
		if fast {
			t.Errorf("%q accepted", doc)
		}
	}
}

// syntheticSchemas exercise what the fast stage merges: $ref with sibling
// keywords, additionalProperties false and as a schema, required names that
// no properties list, nested arrays, integer and exclusive bounds, enums of
// mixed types, boolean schemas and formats.
var syntheticSchemas = map[string]string{
	"defs.json": `{"$defs": {
		"name": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,15}$"},
		"small": {"type": "integer", "minimum": -3, "exclusiveMaximum": 10},
		"obj": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}}, "required": ["a"]},
		"strict": {"type": "object", "properties": {"a": true, "z": {"type": "null"}}, "additionalProperties": false},
		"tree": {"type": "object", "properties": {"name": {"$ref": "#/$defs/name"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}, "additionalProperties": false}
	}}`,
	"refsib.json":    `{"$ref": "defs.json#/$defs/obj", "properties": {"a": true, "c": {"enum": ["x", "y", 3, null, true]}}, "additionalProperties": false, "required": ["c"]}`,
	"twostrict.json": `{"$ref": "defs.json#/$defs/strict", "properties": {"a": {"maxLength": 3}, "q": {"type": "boolean"}}}`,
	"addl.json":      `{"type": ["object", "array"], "properties": {"n": {"$ref": "defs.json#/$defs/small"}}, "additionalProperties": {"type": ["string", "integer"], "minLength": 2, "maximum": 5}, "required": ["m"], "items": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"$ref": "defs.json#/$defs/small"}}}`,
	"tree.json":      `{"$ref": "defs.json#/$defs/tree"}`,
	"misc.json": `{"type": "object", "properties": {
		"when": {"type": "string", "format": "date-time"}, "f": {"format": "date-time"},
		"no": false, "any": true, "neg": {"type": "number", "maximum": -2, "exclusiveMinimum": -5},
		"len": {"type": "string", "minLength": 2, "maxLength": 4}, "e": {"enum": ["a", "b"]},
		"both": {"type": "string", "enum": ["ok", "no"], "pattern": "^o"}, "int": {"type": "integer"}}}`,
}

func compileSynthetic(t testing.TB) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	const base = "https://heed.test/"
	for name, src := range syntheticSchemas {
		if err := c.AddResource(base+name, strings.NewReader(src)); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]*jsonschema.Schema{}
	for name := range syntheticSchemas {
		if name == "defs.json" {
			continue
		}
		s, err := c.Compile(base + name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = s
	}
	return out
}

func TestFastStageOnSyntheticSchemas(t *testing.T) {
	compiled := compileSynthetic(t)
	names := make([]string, 0, len(compiled))
	for name := range compiled {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		s := compiled[name]
		// Each schema its own documents, the same in every run: with one
		// generator shared in map order, a schema that accepts few of them
		// (refsib.json: about 12 in 4,000) got other documents each run,
		// and now and then none the fast stage accepts.
		rng := rand.New(rand.NewPCG(3, uint64(4+i)))
		n, err := newFastCompiler().compile(s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var fastOK, fullOK int
		for i := range 4000 {
			var doc any
			if i%2 == 0 {
				doc = randomValue(rng, 4)
			} else {
				doc = fromSchema(rng, s, 5)
			}
			data, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			fast, full := checkSound(t, name, n, s, data)
			if fast {
				fastOK++
			}
			if full {
				fullOK++
				checkSound(t, name+" mutated", n, s, mutate(rng, data))
			}
		}
		t.Logf("%s: full path accepts %d, fast stage %d", name, fullOK, fastOK)
		if fastOK == 0 {
			t.Errorf("%s: the fast stage accepted nothing", name)
		}
	}
}

func TestFastStageDeclines(t *testing.T) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	for i, src := range []string{
		`{"oneOf": [{"type": "string"}, {"type": "integer"}]}`,
		`{"properties": {"a": {"not": {"type": "string"}}}}`,
		`{"type": "number", "minimum": 0.5}`,
		`{"patternProperties": {"^x": {"type": "string"}}}`,
		`{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}`,
	} {
		url := fmt.Sprintf("https://heed.test/decline%d.json", i)
		if err := c.AddResource(url, strings.NewReader(src)); err != nil {
			t.Fatal(err)
		}
		s, err := c.Compile(url)
		if err != nil {
			continue // jsonschema itself refuses it (the $ref cycle)
		}
		if _, err := newFastCompiler().compile(s); err == nil {
			t.Errorf("%s: compiled, want a decline", src)
		}
	}
}

func FuzzFastStage(f *testing.F) {
	v := loadCatalog(f)
	synth := compileSynthetic(f)
	f.Add([]byte(`{"step":"deploy","index":3,"attempt":1,"output":"ok","duration_ms":12.5}`))
	f.Add([]byte(`{"a":"x","c":3,"b":1e2}`))
	f.Add([]byte(`{"name":"a","kids":[{"name":"b","kids":[]}]}`))
	f.Add([]byte(`[[1,2],[-3]]`))
	f.Add([]byte(`{"m":"ab","n":9,"k":5}`))
	f.Add([]byte(`{"when":"2024-01-02T03:04:05Z","len":"\u00e9\u00e9","e":"a","neg":-2.5}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for typ, n := range v.fast {
			if n != nil {
				checkSound(t, typ, n, v.byType[typ], data)
			}
		}
		for name, s := range synth {
			n, err := newFastCompiler().compile(s)
			if err != nil {
				t.Fatal(err)
			}
			checkSound(t, name, n, s, data)
		}
	})
}

// ordinaryNumbers reports whether every number in data is one the fast
// stage compares itself: no exponent, at most 18 integer digits.
func ordinaryNumbers(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return true
		}
		if n, ok := tok.(json.Number); ok {
			whole, _, _ := strings.Cut(strings.TrimPrefix(string(n), "-"), ".")
			if strings.ContainsAny(string(n), "eE") || len(whole) > 18 {
				return false
			}
		}
	}
}

// Document generators.

var (
	poolStrings = []string{"", "a", "x", "ab", "abc", "abcd", "deploy", "9x", "a-b", "A", "é", "éé", "\u2028",
		"a\nb", "a\"b", "a\\b", "\x01", "o", "ok", "no", "y", "x", "sha256:" + strings.Repeat("ab", 32),
		"2024-01-02T03:04:05Z", "2024-13-02T03:04:05Z", "2024-01-02", strings.Repeat("z", 130), "\ufffd", "m", "n", "c", "q", "z", "a ", " a"}
	poolNumbers = []string{"0", "-0", "1", "-1", "2", "3", "-3", "-4", "5", "9", "10", "-5", "-2", "1.5", "-2.5", "3.0", "1e0",
		"1E2", "0.1", "12.5", "-0.001", "99999999999999999999", "-99999999999999999999", "4611686018427387904", "1.0000000000000000001", "-2.0"}
	poolKeys = []string{"a", "b", "c", "m", "n", "q", "z", "name", "kids", "step", "index", "attempt", "output", "when", "f",
		"no", "any", "neg", "len", "e", "both", "int", "x", "é", "a\nb", ""}
)

func randomValue(rng *rand.Rand, depth int) any {
	k := rng.IntN(7)
	if depth <= 0 && k >= 5 {
		k = rng.IntN(5)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2, 3:
		return poolStrings[rng.IntN(len(poolStrings))]
	case 4:
		return json.Number(poolNumbers[rng.IntN(len(poolNumbers))])
	case 5:
		out := make([]any, rng.IntN(4))
		for i := range out {
			out[i] = randomValue(rng, depth-1)
		}
		return out
	default:
		out := map[string]any{}
		for range rng.IntN(5) {
			out[poolKeys[rng.IntN(len(poolKeys))]] = randomValue(rng, depth-1)
		}
		return out
	}
}

// fromSchema builds a document that is likely, not certain, to be valid
// against s: invalid ones are useful too.
func fromSchema(rng *rand.Rand, s *jsonschema.Schema, depth int) any {
	if rng.IntN(25) == 0 || depth <= 0 {
		return randomValue(rng, 1)
	}
	for s.Ref != nil && len(s.Types) == 0 && len(s.Properties) == 0 && len(s.Enum) == 0 {
		s = s.Ref
	}
	if len(s.Enum) > 0 {
		return s.Enum[rng.IntN(len(s.Enum))]
	}
	typ := ""
	if len(s.Types) > 0 {
		typ = s.Types[rng.IntN(len(s.Types))]
	} else if len(s.Properties) > 0 || len(s.Required) > 0 {
		typ = "object"
	} else if s.Ref != nil {
		return fromSchema(rng, s.Ref, depth)
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props := map[string]*jsonschema.Schema{}
		var required []string
		for x := s; x != nil; x = x.Ref {
			for k, p := range x.Properties {
				if _, ok := props[k]; !ok {
					props[k] = p
				}
			}
			required = append(required, x.Required...)
		}
		// In name order: the documents depend on the seed alone.
		for _, k := range slices.Sorted(maps.Keys(props)) {
			if slices.Contains(required, k) || rng.IntN(2) == 0 {
				out[k] = fromSchema(rng, props[k], depth-1)
			}
		}
		for _, k := range required {
			if _, ok := out[k]; !ok {
				out[k] = randomValue(rng, 1)
			}
		}
		if rng.IntN(8) == 0 {
			out[poolKeys[rng.IntN(len(poolKeys))]] = randomValue(rng, 1)
		}
		return out
	case "array":
		n := rng.IntN(4)
		if s.MinItems > n {
			n = s.MinItems
		}
		out := make([]any, n)
		for i := range out {
			if s.Items2020 != nil {
				out[i] = fromSchema(rng, s.Items2020, depth-1)
			} else {
				out[i] = randomValue(rng, depth-1)
			}
		}
		return out
	case "string":
		var fits []string
		for _, c := range poolStrings {
			if (s.Pattern == nil || s.Pattern.MatchString(c)) && (s.MaxLength == -1 || len([]rune(c)) <= s.MaxLength) &&
				(s.MinLength == -1 || len([]rune(c)) >= s.MinLength) {
				fits = append(fits, c)
			}
		}
		if s.Format == "date-time" && rng.IntN(2) == 0 {
			return "2024-01-02T03:04:05.123+02:00"
		}
		if len(fits) == 0 || rng.IntN(10) == 0 {
			return poolStrings[rng.IntN(len(poolStrings))]
		}
		return fits[rng.IntN(len(fits))]
	case "integer", "number", "":
		return json.Number(poolNumbers[rng.IntN(len(poolNumbers))])
	case "boolean":
		return rng.IntN(2) == 0
	}
	return nil
}

// mutate changes data a little: a byte replaced, removed, doubled or an
// interesting byte inserted.
func mutate(rng *rand.Rand, data []byte) []byte {
	out := bytes.Clone(data)
	if len(out) == 0 {
		return out
	}
	special := []byte(" \t\n\"\\{}[],:0-.eE+u\x00\x1f\x7f\xc3\xa9\xff")
	i := rng.IntN(len(out))
	switch rng.IntN(4) {
	case 0:
		out[i] = special[rng.IntN(len(special))]
	case 1:
		out = append(out[:i], out[i+1:]...)
	case 2:
		out = slices.Insert(out, i, out[i])
	default:
		out = slices.Insert(out, i, special[rng.IntN(len(special))])
	}
	return out
}

func TestASCIIPatternMatchesRegexp(t *testing.T) {
	shaped := []string{
		`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`, `^[A-Za-z_][A-Za-z0-9_.-]{0,127}$`, `^sha256:[0-9a-f]{64}$`,
		`^$`, `^a$`, `^ab*$`, `^[ab]+$`, `^x?$`, `^[0-9]{2,}$`, `^v[0-9]{3}[a-c]{0}$`, `^[\-.]{1,3}$`,
	}
	declined := []string{
		`[a-z]+`, `^[a-z]+`, `[a-z]+$`, `^a|b$`, `(?i)^a$`, `^a.*$`, `^[a-z]*[0-9]$`, `^(ab)$`, `^[^a]$`,
		`^é$`, `(?m)^a$`, `^\d+$` + "x",
	}
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []string{"a", "b", "x", "v", "A", "Z", "_", "-", ".", "0", "9", "f", "sha256:", "é", "\xff", "\n", " ", "\x00"}
	for _, src := range shaped {
		re := regexp.MustCompile(src)
		p := compileASCIIPattern(re)
		if p == nil {
			t.Errorf("%s: not compiled", src)
			continue
		}
		for range 20000 {
			var b strings.Builder
			for range rng.IntN(8) {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			if rng.IntN(10) == 0 {
				b.WriteString(strings.Repeat("a", 60+rng.IntN(80)))
			}
			s := b.String()
			if got, want := p.match([]byte(s)), re.MatchString(s); got != want {
				t.Errorf("%s on %q: %v, regexp says %v", src, s, got, want)
			}
		}
		for _, s := range []string{"sha256:" + strings.Repeat("0f", 32), "sha256:" + strings.Repeat("0f", 33), "a" + strings.Repeat("b", 127), "a" + strings.Repeat("b", 128)} {
			if got, want := p.match([]byte(s)), re.MatchString(s); got != want {
				t.Errorf("%s on %q: %v, regexp says %v", src, s, got, want)
			}
		}
	}
	for _, src := range declined {
		if p := compileASCIIPattern(regexp.MustCompile(src)); p != nil {
			t.Errorf("%s: compiled, want nil", src)
		}
	}
}

// uniqueItems: the fast stage accepts arrays of distinct strings (decoded
// when escaped) and leaves everything else to the full path, which alone
// refuses.
func TestFastStageUniqueItems(t *testing.T) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	const url = "https://heed.test/unique.json"
	if err := c.AddResource(url, strings.NewReader(`{"type": "array", "uniqueItems": true}`)); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	n, err := newFastCompiler().compile(s)
	if err != nil {
		t.Fatalf("uniqueItems declined: %v", err)
	}
	for doc, wantFast := range map[string]bool{
		`[]`:                   true,
		`["a"]`:                true,
		`["a", "b", "c"]`:      true,
		`["a\n", "a"]`:         true,
		`["a", "a"]`:           false,
		`["a", "\u0061"]`:      false,
		`["x", "b", "x"]`:      false,
		`[1, 1]`:               false,
		`[1, 2]`:               false, // numbers: the full path decides
		`[{"a": 1}, {"a": 1}]`: false,
	} {
		fast, full := checkSound(t, "unique", n, s, []byte(doc))
		if fast != wantFast {
			t.Errorf("%s: fast stage accepts = %v, want %v (full path: %v)", doc, fast, wantFast, full)
		}
	}
}
