package events

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"

	"github.com/heedhq/heed/events/internal/schemacheck"
	"github.com/heedhq/heed/schemas"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Validator checks event data and command requests against their JSON
// Schemas (schemas/). It is safe for concurrent use. Each check has two
// stages (internal/schemacheck): a fast acceptor that reads the bytes once
// without allocating and can only say "valid", and the full path
// (encoding/json, then jsonschema), which alone decides refusals and words
// every error.
//
// A schema is compiled the first time a document of its type or command
// is checked, not at construction: each service of heed up has its own
// validator and checks a handful of the catalog's types (the runner never
// sees a change set's events), and compiling all of them in every service
// held ~1 MB of compiled schemas per service and cost ~25 ms of CPU at
// each start (BENCHMARKS.md). Which schemas exist is checked at
// construction, so a catalog type without a schema is still an error
// then, and the schemas are compiled from the binary's own copy
// (schemas.FS) and nothing else: a $ref to any other URL fails.
type Validator struct {
	mu       sync.Mutex // serialises compiling: a jsonschema.Compiler is not safe for concurrent use
	compiler *jsonschema.Compiler
	commands map[string]*lazySchema
	byType   map[Type]*lazySchema
}

// lazySchema is one schema, compiled once on first use.
type lazySchema struct {
	url  string
	once sync.Once
	full *jsonschema.Schema
	fast *schemacheck.Fast // nil: the schema uses a feature the fast stage does not handle
	err  error
}

// NewValidator makes a validator for every type in the catalog and every
// command. A catalog type without a schema is an error: the contract
// would be incomplete.
func NewValidator() (*Validator, error) {
	fsys := schemas.FS()
	v := &Validator{compiler: newCompiler(), commands: map[string]*lazySchema{}, byType: make(map[Type]*lazySchema, len(catalog))}
	add := func(path string) (*lazySchema, error) {
		if _, err := fs.Stat(fsys, path); err != nil {
			return nil, fmt.Errorf("load schemas: %w", err)
		}
		return &lazySchema{url: schemas.BaseURL + path}, nil
	}
	for _, subject := range schemas.Commands() {
		l, err := add(schemas.CommandSchemaPath(subject))
		if err != nil {
			return nil, err
		}
		v.commands[subject] = l
	}
	for _, info := range catalog {
		l, err := add(schemas.EventSchemaPath(string(info.Type)))
		if err != nil {
			return nil, fmt.Errorf("schema for %s: %w", info.Type, err)
		}
		v.byType[info.Type] = l
	}
	return v, nil
}

// newCompiler is a compiler of heed's schemas, which it reads from the
// binary's copy (schemas.FS) and from nowhere else.
func newCompiler() *jsonschema.Compiler {
	fsys := schemas.FS()
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	c.LoadURL = func(url string) (io.ReadCloser, error) {
		name, ok := strings.CutPrefix(url, schemas.BaseURL)
		if !ok {
			return nil, fmt.Errorf("%s is not one of heed's schemas (%s...)", url, schemas.BaseURL)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	return c
}

// compiled is l, compiled now if it was not yet. A schema that does not
// compile (a defect of the binary: TestEverySchemaCompiles) is an internal
// error for every check of its type, and the compiler, which may hold
// parts of it half built, is replaced so that the next schema compiles
// from a clean one.
func (v *Validator) compiled(l *lazySchema) (*lazySchema, error) {
	l.once.Do(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		s, err := func() (s *jsonschema.Schema, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			return v.compiler.Compile(l.url)
		}()
		if err != nil {
			l.err = &Error{Code: CodeInternal, Message: fmt.Sprintf("compile schema %s", strings.TrimPrefix(l.url, schemas.BaseURL)), Err: err}
			v.compiler = newCompiler()
			return
		}
		l.full = s
		if f, err := schemacheck.CompileFast(s); err == nil {
			l.fast = f
		}
	})
	return l, l.err
}

// CompileAll compiles every schema now: for tests, and for a process that
// would rather pay for all of them at start than for each on its first use.
func (v *Validator) CompileAll() error {
	for _, l := range v.commands {
		if _, err := v.compiled(l); err != nil {
			return err
		}
	}
	for _, l := range v.byType {
		if _, err := v.compiled(l); err != nil {
			return err
		}
	}
	return nil
}

// MaxJSONDepth bounds the nesting of events' data and commands' requests;
// it is checked before any parser or schema validator sees the document
// (a deeply nested document costs them memory per level).
const MaxJSONDepth = 64

// JSONDepth is the deepest nesting of arrays and objects in data, counted
// up to limit+1 without parsing.
func JSONDepth(data []byte, limit int) int { return schemacheck.Depth(data, limit) }

// Validate checks data (JSON) against the schema of t.
func (v *Validator) Validate(t Type, data []byte) error {
	l, ok := v.byType[t]
	if !ok {
		return Errorf(CodeUnknownType, "unknown event type %q", t)
	}
	if len(data) == 0 {
		data = []byte("null")
	}
	if JSONDepth(data, MaxJSONDepth) > MaxJSONDepth {
		return Errorf(CodeSchemaViolation, "%s: data nests deeper than %d levels", t, MaxJSONDepth)
	}
	l, err := v.compiled(l)
	if err != nil {
		return err
	}
	if l.fast != nil && l.fast.Accepts(data) {
		return nil
	}
	return validateFull(t, l.full, data)
}

// ValidateCommand checks a command request (JSON) against the schema of
// its subject. A failure is an *Error with code invalid_request (internal
// if the schema itself does not compile).
func (v *Validator) ValidateCommand(subject string, body []byte) error {
	l, ok := v.commands[subject]
	if !ok {
		return Errorf(CodeInvalidRequest, "no schema for command %s", subject)
	}
	if len(body) == 0 {
		return Errorf(CodeInvalidRequest, "%s: the request is empty; send a JSON object (schemas/commands/%s.json)", subject, subject)
	}
	if len(body) > MaxEventBytes {
		return Errorf(CodeInvalidRequest, "%s: the request is %d bytes; the limit is %d", subject, len(body), MaxEventBytes)
	}
	if JSONDepth(body, MaxJSONDepth) > MaxJSONDepth {
		return Errorf(CodeInvalidRequest, "%s: the request nests deeper than %d levels", subject, MaxJSONDepth)
	}
	l, err := v.compiled(l)
	if err != nil {
		return err
	}
	if l.fast != nil && l.fast.Accepts(body) {
		return nil
	}
	err = validateDoc(subject, "the request", l.full, body)
	var e *Error
	if errors.As(err, &e) {
		return &Error{Code: CodeInvalidRequest, Message: e.Message, Err: e.Err}
	}
	return err
}

// validateFull is the full path, its problem as heed's error.
func validateFull(t Type, s *jsonschema.Schema, data []byte) error {
	return validateDoc(string(t), "data", s, data)
}

// validateDoc validates one JSON document: name and noun say what it is in
// messages (heed.run.step.failed's data, heed.cmd.run.start's request).
func validateDoc(name, noun string, s *jsonschema.Schema, data []byte) error {
	p := schemacheck.Full(s, noun, data)
	if p == nil {
		return nil
	}
	return &Error{Code: CodeSchemaViolation, Message: name + ": " + p.Message, Err: p.Err}
}
