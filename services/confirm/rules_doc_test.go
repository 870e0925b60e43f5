package confirm_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/services/confirm"
)

// TestConfirmationsDocRules: the rules file docs/CONFIRMATIONS.md shows
// loads, and decides as the doc says: stage proceeds, production asks,
// and scaling prod-db down asks.
func TestConfirmationsDocRules(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CONFIRMATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Rules.*?```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/CONFIRMATIONS.md has no yaml block under \"## Rules\"")
	}
	rules, err := confirm.ParseRules("docs/CONFIRMATIONS.md", m[1])
	if err != nil {
		t.Fatalf("the rules file docs/CONFIRMATIONS.md shows does not load: %v", err)
	}
	for _, c := range []struct {
		skill, env, name string
		rule             string // "" for none
		answer           string
		ask              bool
	}{
		{"release_prod", "stage", "", "stage auto-proceeds", "proceed", false},
		{"release_prod", "production", "", "production always asks", "", true},
		{"scale_down", "dev", "prod-db", "never scale prod-db down without a person", "", true},
		{"scale_down", "dev", "api", "", "", false},
	} {
		req := &events.ConfirmRequestedData{Skill: c.skill, Step: "confirm", Context: map[string]any{"inputs": map[string]any{"environment": c.env, "name": c.name}}}
		r, err := rules.Match(req)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		switch {
		case c.rule == "" && r != nil:
			t.Errorf("%s %s %s: rule %q applies, want none", c.skill, c.env, c.name, r.Name)
		case c.rule != "" && (r == nil || r.Name != c.rule || r.Answer != c.answer || r.Ask != c.ask):
			t.Errorf("%s %s %s: rule %+v, want %q (answer %q, ask %v)", c.skill, c.env, c.name, r, c.rule, c.answer, c.ask)
		}
	}
}
