package escalator

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultConfig(t *testing.T) {
	rs, err := LoadRules("")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Tiers) != 3 || rs.Tiers[0].Name != "tier1" || rs.Tiers[2].Name != "top" || rs.Tiers[1].Timeout != 5*time.Minute || rs.LearningTier != "tier1" {
		t.Errorf("tiers %+v", rs.Tiers)
	}
	if rs.FinalAction.Critical != ActionDeny || rs.FinalAction.Other != ActionDeny || rs.Session.MaxHeld != 3 || !*rs.Cache.Enabled || !*rs.Cache.NeverForCritical {
		t.Errorf("defaults %+v", rs)
	}
	// A file with tiers only keeps the default rules, on its tiers.
	rs, err = ParseRules("f.yaml", []byte("tiers:\n  - {name: tier1, timeout: 2s}\n  - {name: tier2}\n  - {name: top}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Routing) != 5 || rs.Routing[3].Tier != "tier1" || rs.Tiers[0].Timeout != 2*time.Second || rs.Tiers[1].Timeout != DefaultTimeout {
		t.Errorf("%+v %+v", rs.Routing, rs.Tiers)
	}
}

// A bad config is refused at load with every problem, naming the rule.
func TestBadConfigNamesTheRule(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"tiers:\n  - {name: a}\nrouting:\n  - {name: r1, when: 'risk > 0.5', tier: nowhere}\n", `routing r1: tier "nowhere" is not one of the tiers`},
		{"risk_rules:\n  - {name: bad, when: 'operation ==', risk: 0.5}\n", "risk rule bad: when:"},
		{"risk_rules:\n  - {name: big, when: 'true', risk: 1.5}\n", "risk rule big: risk 1.5 is not between 0 and 1"},
		{"auto_approve:\n  - {name: s, when: 'true', safeguards: [prayer]}\n", `auto_approve rule s: unknown safeguard "prayer"`},
		{"final_action: {critical: shrug}\n", `final_action: "shrug"`},
		{"quorum:\n  - {name: q, when: critical, required: 1}\n", "quorum q: required must be 2 or more"},
		{"tiers:\n  - {name: a}\n  - {name: a}\n", "tier a: named twice"},
		{"surprise: 1\n", "field surprise not found"},
		{"routing:\n  - {name: r, when: 'operation + 1'}\n", "routing r"},
	} {
		_, err := ParseRules("esc.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "esc.yaml") {
			t.Errorf("%q: %v; want %q", c.yaml, err, c.want)
		}
	}
}
