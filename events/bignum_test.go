package events_test

import (
	"errors"
	"testing"

	"github.com/heedhq/heed/events"
)

// A number jsonschema cannot hold is refused, not a panic or a stall.
func TestHugeNumbersAreRefused(t *testing.T) {
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{
		`{"step":"a","index":1e999999999,"attempt":1}`,
		`{"step":"a","index":0,"attempt":1,"output":{"x":[1,2,-1e400]}}`,
		`{"step":"a","index":0,"attempt":1,"output":12345678901234567890123456789012345678901234567890123456789012345}`,
	} {
		err := v.Validate(events.RunStepCompleted, []byte(data))
		if !errors.Is(err, events.ErrSchemaViolation) {
			t.Errorf("%s: got %v, want a schema violation", data, err)
		}
	}
}
