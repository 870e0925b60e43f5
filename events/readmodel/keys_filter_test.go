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
