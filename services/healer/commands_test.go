package healer_test

import (
	"strings"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/tool"
	"github.com/heedhq/heed/services/healer"
)

// A fix taught by hand that the healer could never apply is refused with
// invalid_request and says why; a good one becomes heed.fix.learned data.
func TestTaughtFix(t *testing.T) {
	reg, err := tool.Load("tools.yaml", []byte(`tools:
  quay_check: {command: /bin/true}
  purge_cache: {command: /bin/true}
`))
	if err != nil {
		t.Fatal(err)
	}
	ok := command.LearnFix{Tool: "quay_check", Match: "manifest unknown", Description: "use the full sha",
		ArgsPatch: map[string]any{"tag": `{{ args.tag + "-full" }}`, "retries": 3}, Action: &events.FixAction{Tool: "purge_cache"}}
	id, data, err := healer.TaughtFix(&ok, reg)
	if err != nil {
		t.Fatalf("a good fix was refused: %v", err)
	}
	if id != events.FixID("quay_check", "match:manifest unknown") || data.Source != events.FixFromPerson || data.Match != "manifest unknown" || data.Action.Tool != "purge_cache" || data.By != "unknown" {
		t.Errorf("id %s, data %+v", id, data)
	}
	for _, c := range []struct {
		name string
		edit func(*command.LearnFix)
		reg  *tool.Registry
		want []string
	}{
		{"unknown tool", func(r *command.LearnFix) { r.Tool = "quay_chek" }, reg,
			[]string{`tool "quay_chek" is not in the tools file tools.yaml (did you mean "quay_check"?)`}},
		{"unknown action tool", func(r *command.LearnFix) { r.Action = &events.FixAction{Tool: "nosuch"} }, reg,
			[]string{`action tool "nosuch" is not in the tools file`}},
		{"broken template", func(r *command.LearnFix) { r.ArgsPatch = map[string]any{"tag": "{{ bogus("} }, reg,
			[]string{"args_patch.tag"}},
		{"unknown name in a template", func(r *command.LearnFix) { r.ArgsPatch = map[string]any{"tag": "{{ inputs.sha }}"} }, reg,
			[]string{"args_patch.tag", "unknown name inputs"}},
		{"nothing to change", func(r *command.LearnFix) { r.ArgsPatch, r.Action = nil, nil }, reg,
			[]string{"a fix needs args to change"}},
		{"no tools file", func(*command.LearnFix) {}, &tool.Registry{},
			[]string{`tool "quay_check": the healer has no tools file (start heed with --tools FILE)`}},
		{"every problem at once", func(r *command.LearnFix) {
			r.Tool, r.ArgsPatch = "nosuch", map[string]any{"a": "{{ ( }}", "b": "{{ ) }}"}
		}, reg, []string{`tool "nosuch"`, "args_patch.a", "args_patch.b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := ok
			c.edit(&req)
			_, _, err := healer.TaughtFix(&req, c.reg)
			if events.CodeOf(err) != events.CodeInvalidRequest {
				t.Fatalf("err = %v, want code invalid_request", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") || strings.Count(err.Error(), "invalid_request") != 1 {
				t.Errorf("err = %q: want one line that says its code once", err)
			}
		})
	}
}
