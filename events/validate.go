package events

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/heedhq/heed/events/internal/schemacheck"
	"github.com/heedhq/heed/schemas"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Validator checks event data and command requests against their JSON
// Schemas (schemas/). It is immutable after construction and safe for
// concurrent use. Each check has two stages (internal/schemacheck): a fast
// acceptor that reads the bytes once without allocating and can only say
// "valid", and the full path (encoding/json, then jsonschema), which alone
// decides refusals and words every error.
type Validator struct {
	commands     map[string]*jsonschema.Schema
	fastCommands map[string]*schemacheck.Fast // as fast, for commands' requests
	byType       map[Type]*jsonschema.Schema
	fast         map[Type]*schemacheck.Fast // nil entry: the schema uses a feature the fast stage does not handle
}

// NewValidator compiles the schema of every type in the catalog and of
// every command. A catalog type without a schema is an error: the contract
// would be incomplete.
func NewValidator() (*Validator, error) {
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
		return nil, fmt.Errorf("load schemas: %w", err)
	}
	v := &Validator{commands: map[string]*jsonschema.Schema{}, fastCommands: map[string]*schemacheck.Fast{}, byType: make(map[Type]*jsonschema.Schema), fast: make(map[Type]*schemacheck.Fast)}
	for _, subject := range schemas.Commands() {
		s, err := c.Compile(schemas.BaseURL + schemas.CommandSchemaPath(subject))
		if err != nil {
			return nil, fmt.Errorf("compile schema for %s: %w", subject, err)
		}
		v.commands[subject] = s
		if f, err := schemacheck.CompileFast(s); err == nil {
			v.fastCommands[subject] = f
		}
	}
	for _, info := range catalog {
		s, err := c.Compile(schemas.BaseURL + schemas.EventSchemaPath(string(info.Type)))
		if err != nil {
			return nil, fmt.Errorf("compile schema for %s: %w", info.Type, err)
		}
		v.byType[info.Type] = s
		if f, err := schemacheck.CompileFast(s); err == nil {
			v.fast[info.Type] = f
		}
	}
	return v, nil
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
	s, ok := v.byType[t]
	if !ok {
		return Errorf(CodeUnknownType, "unknown event type %q", t)
	}
	if len(data) == 0 {
		data = []byte("null")
	}
	if JSONDepth(data, MaxJSONDepth) > MaxJSONDepth {
		return Errorf(CodeSchemaViolation, "%s: data nests deeper than %d levels", t, MaxJSONDepth)
	}
	if f := v.fast[t]; f != nil && f.Accepts(data) {
		return nil
	}
	return validateFull(t, s, data)
}

// ValidateCommand checks a command request (JSON) against the schema of
// its subject. A failure is an *Error with code invalid_request.
func (v *Validator) ValidateCommand(subject string, body []byte) error {
	s, ok := v.commands[subject]
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
	if f := v.fastCommands[subject]; f != nil && f.Accepts(body) {
		return nil
	}
	err := validateDoc(subject, "the request", s, body)
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
