package escalator

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
	"gopkg.in/yaml.v3"

	"github.com/heedhq/heed/events"
)

// Final actions.
const (
	ActionDeny    = "deny"
	ActionApprove = "approve"
)

// DefaultTimeout is a tier's timeout when the config gives none (seed).
const DefaultTimeout = 5 * time.Minute

// Member is one approver of a tier and the channels they use.
type Member struct {
	ID       string   `yaml:"id"`
	Channels []string `yaml:"channels"`
}

// Tier is a named, ordered group of approvers.
type Tier struct {
	Name    string        `yaml:"name"`
	Timeout time.Duration `yaml:"timeout"`
	Members []Member      `yaml:"members"`
}

// MemberIDs are the tier's members' identities.
func (t *Tier) MemberIDs() []string {
	out := make([]string, 0, len(t.Members))
	for _, m := range t.Members {
		out = append(out, m.ID)
	}
	return out
}

// RiskRule scores a request that comes without risk (and/or confidence).
type RiskRule struct {
	Name       string   `yaml:"name"`
	When       string   `yaml:"when"`
	Risk       *float64 `yaml:"risk"`
	Confidence *float64 `yaml:"confidence"`
	prog       *vm.Program
}

// AutoApprove is a conditional auto-approve rule with its safeguards.
type AutoApprove struct {
	Name          string   `yaml:"name"`
	When          string   `yaml:"when"`
	Safeguards    []string `yaml:"safeguards"`
	Notes         string   `yaml:"notes"`
	MaxRisk       *float64 `yaml:"max_risk"`
	MinConfidence *float64 `yaml:"min_confidence"`
	prog          *vm.Program
}

// Route is one row of the routing matrix; the first match decides.
type RouteRule struct {
	Name     string `yaml:"name"`
	When     string `yaml:"when"`
	Tier     string `yaml:"tier"`     // escalate to this tier
	Decision string `yaml:"decision"` // or: auto_approve, deny
	Priority int    `yaml:"priority"`
	prog     *vm.Program
}

// QuorumRule asks for several approvers where it matches.
type QuorumRule struct {
	Name     string `yaml:"name"`
	When     string `yaml:"when"`
	Required int    `yaml:"required"`
	Veto     bool   `yaml:"veto"`
	prog     *vm.Program
}

// FinalAction applies after the last tier.
type FinalAction struct {
	Critical string `yaml:"critical"`
	Other    string `yaml:"other"`
}

// CacheConfig says whether the learner's decision cache may approve.
type CacheConfig struct {
	Enabled          *bool `yaml:"enabled"`
	NeverForCritical *bool `yaml:"never_for_critical"`
}

// SessionConfig is the session rule.
type SessionConfig struct {
	MaxHeld int `yaml:"max_held"`
}

// Rules is the escalation config (docs/ESCALATIONS.md).
type Rules struct {
	Tiers        []*Tier        `yaml:"tiers"`
	LearningTier string         `yaml:"learning_tier"`
	RiskRules    []*RiskRule    `yaml:"risk_rules"`
	AutoApprove  []*AutoApprove `yaml:"auto_approve"`
	Routing      []*RouteRule   `yaml:"routing"`
	Quorum       []*QuorumRule  `yaml:"quorum"`
	FinalAction  FinalAction    `yaml:"final_action"`
	Cache        CacheConfig    `yaml:"cache"`
	Session      SessionConfig  `yaml:"session"`
}

// DefaultRulesYAML is the config without a file: the seed's tiers, safe
// paths and routing matrix.
const DefaultRulesYAML = `tiers:
  - {name: tier1, timeout: 5m}
  - {name: tier2, timeout: 5m}
  - {name: top, timeout: 5m}
learning_tier: tier1
auto_approve:
  - name: safe_paths
    when: operation == "file_edit" && (scope startsWith "/tmp/" || scope startsWith ".claude/" || scope startsWith ".git/")
    safeguards: [log_extra, monitor]
  - name: feature_branch_commit
    when: operation == "git_commit" && scope contains "/feature/"
    safeguards: [log_extra]
  - name: test_runs
    when: operation == "test_execution"
    safeguards: [monitor]
routing:
  - {name: critical, when: "risk > 0.9", tier: top, priority: 10}
  - {name: high_risk, when: "risk > 0.7", tier: tier2, priority: 9}
  - {name: medium_risk, when: "risk > 0.4", tier: tier1, priority: 8}
  - {name: low_confidence, when: "confidence < 0.5", tier: learning, priority: 7}
  - {name: low_risk, decision: auto_approve}
final_action: {critical: deny, other: deny}
cache: {enabled: true, never_for_critical: true}
session: {max_held: 3}
`

// LoadRules reads the config file; "" is the default config.
func LoadRules(path string) (*Rules, error) {
	if path == "" {
		return ParseRules("default escalation config", []byte(DefaultRulesYAML))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("escalation config: %w", err)
	}
	return ParseRules(path, b)
}

// env is what rule expressions see.
func env(req *events.EscalationRequestedData, risk, confidence float64, critical bool) map[string]any {
	ctx := req.Context
	if ctx == nil {
		ctx = map[string]any{}
	}
	return map[string]any{"operation": req.Operation, "scope": req.Scope, "environment": req.Environment, "session": req.Session,
		"requester": req.Requester, "context": ctx, "risk": risk, "confidence": confidence, "critical": critical}
}

var safeguardNames = map[string]bool{"log_extra": true, "monitor": true, "sandbox": true, "rollback": true}

// ParseRules parses, completes with the defaults and checks a config:
// every problem is an error naming the file and the rule.
func ParseRules(path string, b []byte) (*Rules, error) {
	var rs Rules
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rs); err != nil && err.Error() != "EOF" {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var def Rules
	if path != "default escalation config" {
		d, err := ParseRules("default escalation config", []byte(DefaultRulesYAML))
		if err != nil {
			return nil, err
		}
		def = *d
	}
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if len(rs.Tiers) == 0 {
		rs.Tiers = def.Tiers
	}
	if rs.AutoApprove == nil {
		rs.AutoApprove = def.AutoApprove
	}
	if rs.Routing == nil {
		rs.Routing = def.Routing
	}
	if rs.FinalAction.Critical == "" {
		rs.FinalAction.Critical = ActionDeny
	}
	if rs.FinalAction.Other == "" {
		rs.FinalAction.Other = ActionDeny
	}
	if rs.Cache.Enabled == nil {
		t := true
		rs.Cache.Enabled = &t
	}
	if rs.Cache.NeverForCritical == nil {
		t := true
		rs.Cache.NeverForCritical = &t
	}
	if rs.Session.MaxHeld <= 0 {
		rs.Session.MaxHeld = 3
	}
	tiers := map[string]bool{}
	for i, t := range rs.Tiers {
		if t.Name == "" || strings.ContainsAny(t.Name, " .*>") {
			bad("tiers[%d]: a tier needs a name without spaces or dots", i)
		}
		if tiers[t.Name] {
			bad("tier %s: named twice", t.Name)
		}
		tiers[t.Name] = true
		if t.Timeout == 0 {
			t.Timeout = DefaultTimeout
		}
		if t.Timeout < 0 {
			bad("tier %s: a negative timeout", t.Name)
		}
		seen := map[string]bool{}
		for _, m := range t.Members {
			if m.ID == "" || seen[m.ID] {
				bad("tier %s: a member without id, or named twice (%q)", t.Name, m.ID)
			}
			seen[m.ID] = true
		}
	}
	if rs.LearningTier == "" {
		rs.LearningTier = rs.Tiers[0].Name
	}
	if !tiers[rs.LearningTier] {
		bad("learning_tier %q is not a tier", rs.LearningTier)
	}
	for _, fa := range []string{rs.FinalAction.Critical, rs.FinalAction.Other} {
		if fa != ActionDeny && fa != ActionApprove {
			bad("final_action: %q is neither deny nor approve", fa)
		}
	}
	compile := func(what, name, when string) *vm.Program {
		if when == "" {
			return nil
		}
		p, err := expr.Compile(when, expr.Env(env(&events.EscalationRequestedData{}, 0, 0, false)), expr.AsBool())
		if err != nil {
			bad("%s %s: when: %v", what, name, err)
		}
		return p
	}
	unit := func(what, name, field string, v *float64) {
		if v != nil && (*v < 0 || *v > 1) {
			bad("%s %s: %s %v is not between 0 and 1", what, name, field, *v)
		}
	}
	for i, r := range rs.RiskRules {
		if r.Name == "" {
			r.Name = fmt.Sprintf("risk_rules[%d]", i)
		}
		if r.When == "" {
			bad("risk rule %s: needs when", r.Name)
		}
		if r.Risk == nil && r.Confidence == nil {
			bad("risk rule %s: give risk and/or confidence", r.Name)
		}
		unit("risk rule", r.Name, "risk", r.Risk)
		unit("risk rule", r.Name, "confidence", r.Confidence)
		r.prog = compile("risk rule", r.Name, r.When)
	}
	for i, a := range rs.AutoApprove {
		if a.Name == "" {
			a.Name = fmt.Sprintf("auto_approve[%d]", i)
		}
		if a.When == "" {
			bad("auto_approve rule %s: needs when", a.Name)
		}
		for _, s := range a.Safeguards {
			if !safeguardNames[s] {
				bad("auto_approve rule %s: unknown safeguard %q (log_extra, monitor, sandbox, rollback)", a.Name, s)
			}
		}
		if a.MaxRisk == nil {
			v := 0.4
			a.MaxRisk = &v
		}
		if a.MinConfidence == nil {
			v := 0.6
			a.MinConfidence = &v
		}
		unit("auto_approve rule", a.Name, "max_risk", a.MaxRisk)
		unit("auto_approve rule", a.Name, "min_confidence", a.MinConfidence)
		a.prog = compile("auto_approve rule", a.Name, a.When)
	}
	for i, r := range rs.Routing {
		if r.Name == "" {
			r.Name = fmt.Sprintf("routing[%d]", i)
		}
		if r.Tier == "learning" {
			r.Tier = rs.LearningTier
		}
		switch {
		case r.Tier != "" && r.Decision != "" && r.Decision != events.RouteEscalate:
			bad("routing %s: give tier or decision, not both", r.Name)
		case r.Tier != "":
			if !tiers[r.Tier] {
				bad("routing %s: tier %q is not one of the tiers", r.Name, r.Tier)
			}
			r.Decision = events.RouteEscalate
		case r.Decision == events.RouteAutoApprove || r.Decision == events.RouteDeny:
		default:
			bad("routing %s: give a tier, or decision auto_approve or deny", r.Name)
		}
		r.prog = compile("routing", r.Name, r.When)
	}
	for i, q := range rs.Quorum {
		if q.Name == "" {
			q.Name = fmt.Sprintf("quorum[%d]", i)
		}
		if q.Required < 2 {
			bad("quorum %s: required must be 2 or more", q.Name)
		}
		q.prog = compile("quorum", q.Name, q.When)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %s", path, strings.Join(problems, "; "))
	}
	return &rs, nil
}

func match(p *vm.Program, e map[string]any) (bool, error) {
	if p == nil {
		return true, nil
	}
	out, err := expr.Run(p, e)
	if err != nil {
		return false, err
	}
	b, _ := out.(bool)
	return b, nil
}

// tierIndex is the position of a tier, -1 if none.
func (rs *Rules) tierIndex(name string) int {
	for i, t := range rs.Tiers {
		if t.Name == name {
			return i
		}
	}
	return -1
}
