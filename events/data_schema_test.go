package events

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// TestDataTypesMatchSchemas: each event's Go data type and its JSON Schema
// name the same fields, all the way down, and every field the schema
// requires is one the Go type always writes. Together with
// TestSamplesCoverCatalog (every Go type writes what its schema accepts)
// the structs and the schemas cannot drift apart unnoticed.
func TestDataTypesMatchSchemas(t *testing.T) {
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range Catalog() {
		d, ok := DataType(info.Type)
		if !ok {
			t.Errorf("%s has no Go data type in dataTypes", info.Type)
			continue
		}
		for _, problem := range compareShape(d, v.schemaOf(t, info.Type), string(info.Type)) {
			t.Error(problem)
		}
	}
}

func resolve(s *jsonschema.Schema) *jsonschema.Schema {
	for s != nil && s.Ref != nil && len(s.Properties) == 0 && s.Types == nil {
		s = s.Ref
	}
	return s
}

// compareShape lists where Go type t and schema s disagree.
func compareShape(t reflect.Type, s *jsonschema.Schema, at string) []string {
	s = resolve(s)
	if s == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(time.Time{}) {
		return nil
	}
	switch t.Kind() {
	case reflect.Slice:
		if s.Items2020 != nil {
			return compareShape(t.Elem(), s.Items2020, at+"[]")
		}
		return nil
	case reflect.Struct:
	default:
		return nil // maps and values of any shape: the schema says more than Go can
	}
	var out []string
	fields := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = true
		ps, ok := s.Properties[name]
		if !ok {
			out = append(out, at+"."+name+": a field of the Go type the schema does not have")
			continue
		}
		omit := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		if slices.Contains(s.Required, name) && omit && f.Type.Kind() != reflect.Struct {
			out = append(out, at+"."+name+": required by the schema, but the Go type may leave it out (omitempty)")
		}
		out = append(out, compareShape(f.Type, ps, at+"."+name)...)
	}
	var missing []string
	for name := range s.Properties {
		if !fields[name] {
			missing = append(missing, at+"."+name+": a property of the schema the Go type does not have")
		}
	}
	sort.Strings(missing)
	return append(out, missing...)
}
