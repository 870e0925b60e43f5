package schemacheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Problem is why a document is not valid, in words for people: Message
// does not name the document; the caller does ("heed.run.step.failed: ",
// "heed.cmd.run.start: the request").
type Problem struct {
	// Syntax: the document is not (exactly one) JSON value, or holds a
	// number out of range. Otherwise it is JSON that breaks the schema.
	Syntax  bool
	Message string
	Err     error // jsonschema's error tree, when it refused
}

func (p *Problem) Error() string { return p.Message }

// Full validates data against s: encoding/json, then jsonschema. noun
// names the document in syntax messages ("data", "the request").
func Full(s *jsonschema.Schema, noun string, data []byte) (p *Problem) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return &Problem{Syntax: true, Message: fmt.Sprintf("%s is not JSON: %v", noun, err)}
	}
	if dec.More() {
		return &Problem{Syntax: true, Message: fmt.Sprintf("%s has trailing content after the JSON value", noun)}
	}
	// Numbers jsonschema cannot hold (1e999999999) would make it panic or
	// spin on big rationals: refuse them first.
	if where := badNumber(doc, ""); where != "" {
		return &Problem{Syntax: true, Message: fmt.Sprintf("at %s: number out of range", where)}
	}
	defer func() {
		if r := recover(); r != nil {
			p = &Problem{Message: fmt.Sprintf("%s cannot be validated: %v", noun, r)}
		}
	}()
	if err := s.Validate(doc); err != nil {
		return &Problem{Message: describe(err), Err: err}
	}
	return nil
}

// Depth is the deepest nesting of arrays and objects in data, counted up
// to limit+1 without parsing.
func Depth(data []byte, limit int) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth++; depth > deepest {
				if deepest = depth; deepest > limit {
					return deepest
				}
			}
		case ']', '}':
			depth--
		}
	}
	return deepest
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

// badNumber returns the location of the first number that is not a finite
// float64 or has more than 64 characters, or "".
func badNumber(v any, at string) string {
	switch x := v.(type) {
	case json.Number:
		if len(x) > 64 {
			return orRoot(at)
		}
		if f, err := strconv.ParseFloat(string(x), 64); err != nil || math.IsInf(f, 0) {
			return orRoot(at)
		}
	case map[string]any:
		for k, e := range x {
			if w := badNumber(e, at+"/"+k); w != "" {
				return w
			}
		}
	case []any:
		for i, e := range x {
			if w := badNumber(e, at+"/"+strconv.Itoa(i)); w != "" {
				return w
			}
		}
	}
	return ""
}

func orRoot(at string) string {
	if at == "" {
		return "/"
	}
	return at
}
