package events

import (
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// schemaOf is the compiled schema of t, compiled now if need be.
func (v *Validator) schemaOf(tb testing.TB, t Type) *jsonschema.Schema {
	tb.Helper()
	l, ok := v.byType[t]
	if !ok {
		tb.Fatalf("no schema for %s", t)
	}
	l, err := v.compiled(l)
	if err != nil {
		tb.Fatal(err)
	}
	return l.full
}

// Every schema of the contract compiles: schemas are compiled on first
// use, so a broken one would otherwise show only when its first event
// came.
func TestEverySchemaCompiles(t *testing.T) {
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	if err := v.CompileAll(); err != nil {
		t.Fatal(err)
	}
	for typ, l := range v.byType {
		if l.full == nil {
			t.Errorf("%s: not compiled", typ)
		}
	}
	for subject, l := range v.commands {
		if l.full == nil {
			t.Errorf("%s: not compiled", subject)
		}
	}
}

// A validator compiles only what it is asked to check, however many
// goroutines ask at the same moment; the verdicts are those of a
// validator that compiled everything first.
func TestSchemasCompiledOnFirstUse(t *testing.T) {
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	all, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	if err := all.CompileAll(); err != nil {
		t.Fatal(err)
	}
	good := []byte(`{"step":"deploy","index":3,"attempt":1,"output":"ok","duration_ms":12.5}`)
	bad := []byte(`{"step":"deploy","index":"three"}`)
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = v.Validate(RunStepCompleted, good)
			} else {
				errs[i] = v.Validate(RunStepCompleted, bad)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		want := all.Validate(RunStepCompleted, good)
		if i%2 == 1 {
			want = all.Validate(RunStepCompleted, bad)
		}
		if (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
			t.Errorf("check %d: %v, want %v", i, err, want)
		}
	}
	if errs[1] == nil || CodeOf(errs[1]) != CodeSchemaViolation {
		t.Errorf("bad data: %v, want a schema violation", errs[1])
	}
	compiled := 0
	for _, l := range v.byType {
		if l.full != nil {
			compiled++
		}
	}
	for _, l := range v.commands {
		if l.full != nil {
			compiled++
		}
	}
	if compiled != 1 {
		t.Errorf("%d schemas compiled after checking one type, want 1", compiled)
	}
	if err := v.ValidateCommand("heed.cmd.run.start", []byte(`{}`)); CodeOf(err) != CodeInvalidRequest {
		t.Errorf("an empty start request: %v, want invalid_request", err)
	}
}

// The compiler reads heed's own schemas only: a reference to any other
// URL fails to compile instead of being fetched.
func TestSchemasLoadOnlyFromTheBinary(t *testing.T) {
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{"https://example.com/schema.json", "https://heed.dev/schemas/events/heed.nothing.here.json"} {
		l := &lazySchema{url: url}
		if _, err := v.compiled(l); CodeOf(err) != CodeInternal {
			t.Fatalf("compiling %s: %v, want an internal error", url, err)
		}
		if _, err := v.compiled(l); CodeOf(err) != CodeInternal {
			t.Fatalf("compiling %s again: %v, want the same internal error", url, err)
		}
	}
	if err := v.Validate(RunStepCompleted, []byte(`{"step":"a","index":0,"attempt":1,"duration_ms":1}`)); err != nil {
		t.Fatalf("a failed compile of one schema broke the next: %v", err)
	}
}
