package heedmcp

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/heedhq/heed/events/command"
)

// TestEmptyOutputsMatchTheirSchemas: the SDK checks every tool's
// structured output against the schema it infers from the output type,
// and a mismatch is a protocol error, not a tool error. A nil map
// marshals to null where that schema says object: stats on a heed with no
// escalation yet failed that way. Each tool's output, as its handler
// fills it when heed has nothing to report, must pass.
func TestEmptyOutputsMatchTheirSchemas(t *testing.T) {
	for _, out := range []any{
		emptyStats(StatsOut{}), ConfirmRequestOut{}, KnownIssuesOut{}, RunResult{}, SkillListOut{},
		command.AnswerReply{}, command.DecisionHistoryReply{}, command.EscalationReply{}, command.EscalationState{},
		command.FixReply{}, command.HeldReply{}, command.OutcomeReply{}, command.ProposeReply{},
	} {
		typ := reflect.TypeOf(out)
		t.Run(typ.Name(), func(t *testing.T) {
			schema, err := jsonschema.ForType(typ, &jsonschema.ForOptions{})
			if err != nil {
				t.Fatal(err)
			}
			resolved, err := schema.Resolve(nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			if err := resolved.Validate(v); err != nil {
				t.Fatalf("%s as a handler returns it empty, %s, does not match its schema: %v", typ, b, err)
			}
		})
	}
}
