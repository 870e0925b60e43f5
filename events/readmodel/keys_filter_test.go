package readmodel

import (
	"strings"
	"testing"
)

// matches says whether a KV key matches a key filter, token by token, as
// the server matches subjects ("*" one token, ">" the rest).
func matches(filter, key string) bool {
	f, k := strings.Split(filter, "."), strings.Split(key, ".")
	for i, t := range f {
		if t == ">" {
			return len(k) > i
		}
		if i >= len(k) || (t != "*" && t != k[i]) {
			return false
		}
	}
	return len(f) == len(k)
}

// The services that watch a bucket for one kind of key watch it with a
// filter: what they read must match it, and the bucket's other keys
// must not (a service holds every key it watches in memory).
func TestWatchFiltersSelectTheirKeys(t *testing.T) {
	cases := []struct {
		filter   string
		keys     []string // read through the filter
		excluded []string // the bucket's other keys
	}{
		{DecisionCacheKeys,
			[]string{DecisionKey("deploy", "web"), EscalationDecisionKey("deploy", "prod", "service:api"), EscalationDecisionKey("test_execution", "", "")},
			[]string{"req.cf-01jabc", "run.run-01jabc", EscalationKey("esc-01jabc")}},
		{PatternKeys,
			[]string{"pat-0123456789abcdef0123"},
			[]string{"tool.kube_scale", "call.run-01jabc"}},
	}
	for _, c := range cases {
		for _, k := range c.keys {
			if !matches(c.filter, k) {
				t.Errorf("%s does not match %s: its watcher would miss it", k, c.filter)
			}
		}
		for _, k := range c.excluded {
			if matches(c.filter, k) {
				t.Errorf("%s matches %s: its watcher would hold it", k, c.filter)
			}
		}
	}
}

// Different operations, environments or scopes never share a decision
// record; plain names keep the keys they always had.
func TestDecisionKeysAreOneToOne(t *testing.T) {
	names := []string{"", "_", "*", "/", "//", "=2F", ".", "=", "=5F", "wipe.db", "wipe_db", "wipe=2Edb", "staging.eu", "staging_eu", "a b", "ä", "user:alice"}
	seen := map[string]string{}
	for _, op := range names {
		for _, env := range []string{"production", "prod.eu", "prod_eu"} {
			for _, scope := range names {
				k := EscalationDecisionKey(op, env, scope)
				if prev, ok := seen[k]; ok {
					t.Errorf("%q and %q share the key %s", prev, op+"|"+env+"|"+scope, k)
				}
				seen[k] = op + "|" + env + "|" + scope
				if strings.Count(k, ".") != 3 || strings.Contains(k, "..") {
					t.Errorf("%s is not four tokens", k)
				}
			}
		}
	}
	if got := EscalationDecisionKey("deploy_prod", "production", "service-api"); got != "op.deploy_prod.production.service-api" {
		t.Errorf("a plain name's key changed: %s", got)
	}
	if got := DecisionKey("release_prod/confirm_release", ""); got != "op.release_prod/confirm_release._" {
		t.Errorf("DecisionKey = %s", got)
	}
}
