package healer

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/heedhq/heed/lib/skill"
)

// Pattern classifies failures by what their error says, and may name a
// generic fix: a tool to run before retrying the step as it was.
type Pattern struct {
	Kind  string      `yaml:"kind"`
	Match []string    `yaml:"match"` // case-insensitive substrings
	Fix   *PatternFix `yaml:"fix"`
	args  map[string]*skill.Template
}

// PatternFix is a generic fix.
type PatternFix struct {
	Tool string            `yaml:"tool"`
	Args map[string]string `yaml:"args"` // templates over args, error, tool, cluster
}

// Rules are the healer's rules (its configuration file): how failures are
// classified, which generic fix each class gets, and the bounds on healing.
type Rules struct {
	// MaxHeals bounds heal retries per step.
	MaxHeals int `yaml:"max_heals"`
	// Patterns are tried in order; the first match classifies.
	Patterns []*Pattern `yaml:"patterns"`
	// Clusters maps a substring of a tool's name to its cluster (the login
	// fix's target), after the tool's own cluster setting.
	Clusters map[string]string `yaml:"clusters"`
	// DefaultCluster is used when nothing else says.
	DefaultCluster string `yaml:"default_cluster"`
}

// DefaultRulesYAML are the rules used without a file: the seed's
// patterns (network → reconnect, auth → login) plus quota, not-found and
// timeout classes without a generic fix.
const DefaultRulesYAML = `
max_heals: 2
default_cluster: stage
clusters:
  bonfire: ephemeral
  konflux: konflux
patterns:
  - kind: auth
    match: [unauthorized, "401", "403", forbidden, token expired, permission denied, must be logged in]
    fix: {tool: kube_login, args: {cluster: "{{ cluster }}"}}
  - kind: network
    match: [no route to host, connection refused, dial tcp, network unreachable, connection reset, "i/o timeout"]
    fix: {tool: vpn_connect}
  - kind: quota
    match: [quota exceeded, rate limit, too many requests, "429"]
  - kind: not_found
    match: [not found, "404", manifest unknown, no such]
  - kind: timeout
    match: [timeout, timed out, deadline exceeded]
`

// LoadRules reads a healer rules file, or the defaults for "".
func LoadRules(path string) (*Rules, error) {
	src := []byte(DefaultRulesYAML)
	name := "default healer config"
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("healer config: %w", err)
		}
		src, name = b, path
	}
	return ParseRules(name, src)
}

// ParseRules parses and compiles healer rules.
func ParseRules(name string, src []byte) (*Rules, error) {
	var c Rules
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if c.MaxHeals <= 0 {
		c.MaxHeals = 2
	}
	if c.DefaultCluster == "" {
		c.DefaultCluster = "stage"
	}
	vars := map[string]any{"args": nil, "error": nil, "tool": nil, "cluster": nil}
	for i, p := range c.Patterns {
		if p.Kind == "" || len(p.Match) == 0 {
			return nil, fmt.Errorf("%s: pattern %d needs a kind and match strings", name, i+1)
		}
		for j := range p.Match {
			p.Match[j] = strings.ToLower(p.Match[j])
		}
		if p.Fix != nil {
			if p.Fix.Tool == "" {
				return nil, fmt.Errorf("%s: pattern %s: fix needs a tool", name, p.Kind)
			}
			p.args = map[string]*skill.Template{}
			for k, v := range p.Fix.Args {
				t, err := skill.CompileTemplate(v, skill.Pos{File: name}, vars)
				if err != nil {
					return nil, fmt.Errorf("%s: pattern %s: fix arg %s: %v", name, p.Kind, k, err)
				}
				p.args[k] = t
			}
		}
	}
	return &c, nil
}

// Classify returns the first pattern whose strings the error contains.
func (c *Rules) Classify(msg string) *Pattern {
	m := strings.ToLower(msg)
	for _, p := range c.Patterns {
		for _, s := range p.Match {
			if containsMatch(m, s) {
				return p
			}
		}
	}
	return nil
}

// containsMatch reports whether msg contains s, where an edge of s that is
// a digit must not continue a run of letters or digits in msg: "401"
// matches "HTTP 401" and "status=401" but not the image tag "38f4014"
// (hex ids and timestamps are full of status codes). Letters match inside
// words as before ("timeout" in "ReadTimeout").
func containsMatch(msg, s string) bool {
	if s == "" {
		return false
	}
	digitStart, digitEnd := isDigit(s[0]), isDigit(s[len(s)-1])
	for from := 0; ; {
		i := strings.Index(msg[from:], s)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(s)
		if (!digitStart || i == 0 || !isAlnum(msg[i-1])) && (!digitEnd || end == len(msg) || !isAlnum(msg[end])) {
			return true
		}
		from = i + 1
	}
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func isAlnum(b byte) bool { return isDigit(b) || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') }

// Cluster detects the cluster a tool acts on: its own setting, then the
// name map, then "prod" in its output or error, then the default.
func (c *Rules) Cluster(toolName, toolCluster, text string) string {
	if toolCluster != "" {
		return toolCluster
	}
	for sub, cl := range c.Clusters {
		if strings.Contains(toolName, sub) {
			return cl
		}
	}
	if strings.Contains(strings.ToLower(text), "prod") {
		return "prod"
	}
	return c.DefaultCluster
}
