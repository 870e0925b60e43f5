package healer_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/heedhq/heed/services/healer"
	"gopkg.in/yaml.v3"
)

// TestHealingDocShowsDefaultRules: the patterns file docs/HEALING.md shows
// as the built-in one is the built-in one, so a pattern added to or
// changed in the code cannot leave the doc behind.
func TestHealingDocShowsDefaultRules(t *testing.T) {
	doc, err := os.ReadFile("../../docs/HEALING.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## The patterns file.*?```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/HEALING.md has no yaml block under \"## The patterns file\"")
	}
	shown, err := healer.ParseRules("docs/HEALING.md", m[1])
	if err != nil {
		t.Fatalf("the patterns file docs/HEALING.md shows does not load: %v", err)
	}
	builtin, err := healer.LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := yaml.Marshal(shown)
	b, _ := yaml.Marshal(builtin)
	if string(a) != string(b) {
		t.Errorf("docs/HEALING.md shows other patterns than the built-in ones (healer.DefaultRulesYAML):\nshown:\n%s\nbuilt in:\n%s", a, b)
	}
}
