package confirm

import (
	"bytes"
	"fmt"
	"os"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
	"gopkg.in/yaml.v3"

	"github.com/heedhq/heed/events"
)

// Rule is an operator's standing decision, e.g. "stage auto-proceeds" or
// "production always asks". Rules come before learned preferences.
type Rule struct {
	Name   string `yaml:"name"`
	Skill  string `yaml:"skill"`  // only this skill (optional)
	Step   string `yaml:"step"`   // only this step (optional)
	When   string `yaml:"when"`   // expression over skill, step, inputs, run_id, requester (optional)
	Answer string `yaml:"answer"` // answer with this option value ("proceed": the proceed option)
	Ask    bool   `yaml:"ask"`    // always ask people: no preference applies

	prog *vm.Program
}

// Rules is an ordered rule list; the first match decides.
type Rules struct {
	List []*Rule `yaml:"rules"`
}

// LoadRules reads a rules file.
func LoadRules(path string) (*Rules, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	return ParseRules(path, b)
}

// ParseRules parses and compiles rules.
func ParseRules(path string, b []byte) (*Rules, error) {
	var rs Rules
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rs); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	for i, r := range rs.List {
		if r.Name == "" {
			r.Name = fmt.Sprintf("rule %d", i+1)
		}
		if (r.Answer == "") == !r.Ask {
			return nil, fmt.Errorf("%s: %s: give exactly one of answer or ask", path, r.Name)
		}
		if r.When != "" {
			p, err := expr.Compile(r.When, expr.Env(ruleEnv(&events.ConfirmRequestedData{})), expr.AsBool(), expr.AllowUndefinedVariables())
			if err != nil {
				return nil, fmt.Errorf("%s: %s: when: %v", path, r.Name, err)
			}
			r.prog = p
		}
	}
	return &rs, nil
}

func ruleEnv(req *events.ConfirmRequestedData) map[string]any {
	inputs, _ := req.Context["inputs"].(map[string]any)
	if inputs == nil {
		inputs = map[string]any{}
	}
	return map[string]any{"skill": req.Skill, "step": req.Step, "inputs": inputs, "run_id": req.RunID, "requester": req.Requester}
}

// Match returns the first rule that applies to req.
func (rs *Rules) Match(req *events.ConfirmRequestedData) (*Rule, error) {
	if rs == nil {
		return nil, nil
	}
	for _, r := range rs.List {
		if r.Skill != "" && r.Skill != req.Skill || r.Step != "" && r.Step != req.Step {
			continue
		}
		if r.prog != nil {
			out, err := expr.Run(r.prog, ruleEnv(req))
			if err != nil {
				return nil, fmt.Errorf("rule %s: %w", r.Name, err)
			}
			if b, _ := out.(bool); !b {
				continue
			}
		}
		return r, nil
	}
	return nil, nil
}
