package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

	"github.com/heedhq/heed/schemas"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Validator checks event data against the JSON Schema of its type. It is
// immutable after construction and safe for concurrent use.
type Validator struct {
	byType map[Type]*jsonschema.Schema
}

// NewValidator compiles the schema of every type in the catalog. A catalog
// type without a schema is an error: the contract would be incomplete.
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
	v := &Validator{byType: make(map[Type]*jsonschema.Schema)}
	for _, info := range catalog {
		s, err := c.Compile(schemas.BaseURL + schemas.EventSchemaPath(string(info.Type)))
		if err != nil {
			return nil, fmt.Errorf("compile schema for %s: %w", info.Type, err)
		}
		v.byType[info.Type] = s
	}
	return v, nil
}

// Validate checks data (JSON) against the schema of t.
func (v *Validator) Validate(t Type, data []byte) error {
	s, ok := v.byType[t]
	if !ok {
		return Errorf(CodeUnknownType, "unknown event type %q", t)
	}
	if len(data) == 0 {
		data = []byte("null")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return Errorf(CodeSchemaViolation, "%s: data is not JSON: %v", t, err)
	}
	if dec.More() {
		return Errorf(CodeSchemaViolation, "%s: data has trailing content after the JSON value", t)
	}
	if err := s.Validate(doc); err != nil {
		return &Error{Code: CodeSchemaViolation, Message: fmt.Sprintf("%s: %s", t, describe(err)), Err: err}
	}
	return nil
}

// describe turns a jsonschema error tree into one readable line per leaf:
// "at /options/0: missing property 'value'".
func describe(err error) string {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return err.Error()
	}
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := e.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			leaves = append(leaves, fmt.Sprintf("at %s: %s", loc, e.Message))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(leaves) > 5 {
		leaves = append(leaves[:5], fmt.Sprintf("and %d more", len(leaves)-5))
	}
	return strings.Join(leaves, "; ")
}
