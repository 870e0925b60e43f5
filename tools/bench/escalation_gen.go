package main

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// The escalation simulation's generator: a fixed population of agent
// sessions doing the work agents do, most of it repeated. It is
// deterministic (a seed), so the second pass replays exactly the first
// pass's operations and the learning is all the difference between them.
//
// Each operation is drawn in two steps. First its kind, by weight (the
// table opKinds: test runs, feature-branch commits and file edits in safe
// paths are most of the work; deploys to stage, migrations and restarts
// less; force pushes to main, production deploys and deletions rare).
// Then its scope among the kind's scopes by a Zipf law (weight of the k-th
// scope ∝ 1/k^zipfS): an agent works on a few repositories, services and
// paths again and again, and now and then on another. The session is drawn
// uniformly from genSessions. Risks are given by the agent as the kind
// says (the same for every scope of a kind), so the routing is the
// escalator's default matrix and not a rule file's; the confidence is the
// agent's, lower on the kinds it is new to. The operation names and scopes
// of the safe kinds are those the escalator's default auto-approve rules
// know (test_execution, git_commit on a /feature/ branch, file_edit under
// /tmp/, .claude/ or .git/): docs/ESCALATIONS.md, The config.

// genSeed is the generator's seed; BENCHMARKS.md's figures are for it.
const genSeed = 14

// zipfS is the exponent of the scopes' Zipf law.
const zipfS = 1.3

// genSessions is how many agent sessions share the work.
const genSessions = 8

// opKind is one kind of operation and how the simulated approver and the
// agent treat it.
type opKind struct {
	operation   string
	env         string
	weight      float64  // share of the operations, relative to the others
	risk        float64  // the agent's risk score
	confidence  float64  // the agent's confidence
	scopes      []string // in order of popularity (Zipf)
	deny        float64  // the approver denies this share of what is offered (by the operation's draw)
	failure     float64  // the agent reports failure for this share of what it did
	description string
}

// opKinds is the mix. Risks: > 0.9 goes to the top tier, > 0.7 tier 2,
// > 0.4 tier 1, else auto unless the confidence is < 0.5 (the learning
// tier): the escalator's default matrix.
var opKinds = []opKind{
	{operation: "test_execution", env: "dev", weight: 30, risk: 0.1, confidence: 0.9, scopes: []string{"repo:api", "repo:web", "repo:worker", "repo:billing"}, failure: 0.05, description: "test runs"},
	{operation: "git_commit", env: "dev", weight: 18, risk: 0.2, confidence: 0.85, scopes: []string{"refs/heads/feature/login", "refs/heads/feature/search", "refs/heads/feature/export", "refs/heads/feature/retry"}, description: "feature-branch commits"},
	{operation: "file_edit", env: "dev", weight: 14, risk: 0.15, confidence: 0.8, scopes: []string{"/tmp/scratch/notes.md", ".claude/settings.json", "/tmp/build/out.log", ".git/COMMIT_EDITMSG"}, description: "file edits in safe paths"},
	{operation: "file_edit", env: "dev", weight: 6, risk: 0.3, confidence: 0.4, scopes: []string{"src/auth/session.go", "deploy/values.yaml", "src/billing/invoice.go"}, description: "file edits the agent is unsure of (learning tier)"},
	{operation: "deploy", env: "stage", weight: 14, risk: 0.5, confidence: 0.8, scopes: []string{"service:api", "service:web", "service:worker"}, failure: 0.05, description: "deploys to stage"},
	{operation: "db_migrate", env: "stage", weight: 5, risk: 0.6, confidence: 0.7, scopes: []string{"db:orders", "db:users"}, description: "migrations on stage"},
	{operation: "restart", env: "prod", weight: 5, risk: 0.75, confidence: 0.8, scopes: []string{"service:api", "service:worker"}, description: "production restarts"},
	{operation: "deploy", env: "prod", weight: 4, risk: 0.8, confidence: 0.8, scopes: []string{"service:api", "service:web"}, deny: 0.2, description: "production deploys"},
	{operation: "force_push", env: "prod", weight: 2, risk: 0.95, confidence: 0.6, scopes: []string{"branch:main"}, deny: 0.5, description: "force pushes to main (critical)"},
	{operation: "delete", env: "prod", weight: 2, risk: 0.97, confidence: 0.6, scopes: []string{"bucket:backups", "table:orders_archive"}, deny: 0.5, description: "deletions in production (critical)"},
}

// genOp is one generated operation.
type genOp struct {
	seq        int
	session    string
	operation  string
	scope      string
	env        string
	risk       float64
	confidence float64
	deny       bool // the simulated approver denies it if asked
	fail       bool // the agent reports failure after doing it
	kind       int  // index in opKinds
}

// critical is the share of the risk scale the approver treats as critical.
func (o genOp) critical() bool { return o.risk > 0.9 }

// generate returns n operations from seed. The same seed gives the same
// operations.
func generate(seed uint64, n int) []genOp {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var total float64
	for _, k := range opKinds {
		total += k.weight
	}
	out := make([]genOp, 0, n)
	for i := range n {
		x := r.Float64() * total
		ki := 0
		for ; ki < len(opKinds)-1; ki++ {
			if x < opKinds[ki].weight {
				break
			}
			x -= opKinds[ki].weight
		}
		k := opKinds[ki]
		out = append(out, genOp{
			seq:        i,
			session:    fmt.Sprintf("agent-%d", r.IntN(genSessions)+1),
			operation:  k.operation,
			scope:      k.scopes[zipfIndex(r, len(k.scopes))],
			env:        k.env,
			risk:       k.risk,
			confidence: k.confidence,
			deny:       r.Float64() < k.deny,
			fail:       r.Float64() < k.failure,
			kind:       ki,
		})
	}
	return out
}

// zipfIndex draws 0..n-1 with weight 1/(k+1)^zipfS.
func zipfIndex(r *rand.Rand, n int) int {
	var total float64
	for k := range n {
		total += 1 / math.Pow(float64(k+1), zipfS)
	}
	x := r.Float64() * total
	for k := range n {
		w := 1 / math.Pow(float64(k+1), zipfS)
		if x < w {
			return k
		}
		x -= w
	}
	return n - 1
}

// mixSummary counts the generated operations per kind, for the report.
func mixSummary(ops []genOp) []string {
	counts := make([]int, len(opKinds))
	pairs := map[string]int{}
	for _, o := range ops {
		counts[o.kind]++
		pairs[o.operation+" "+o.env+" "+o.scope]++
	}
	var out []string
	for i, k := range opKinds {
		out = append(out, fmt.Sprintf("%d %s (risk %.2f)", counts[i], k.description, k.risk))
	}
	out = append(out, fmt.Sprintf("%d distinct operation+environment+scope", len(pairs)))
	return out
}

// cutCeiling is the most any decision cache under the seed's rule could
// cut from ops run twice, the baseline being the second pass without
// learning (every operation the matrix does not approve goes to people):
// an ideal cache that knows every decision at once, counts every approved
// operation the agent did not report failed as a success, and approves a
// key decided more than 3 times with more than 90% success; a critical
// operation (risk > 0.9) is never cached (docs/ESCALATIONS.md). It returns
// how many of the second pass would still go to people, the baseline and
// the cut.
func cutCeiling(ops []genOp) (people, baseline int, cut float64) {
	type tally struct{ n, ok int }
	seen := map[string]*tally{}
	for pass := range 2 {
		for _, o := range ops {
			if o.risk <= 0.4 && o.confidence >= 0.5 {
				continue // the matrix approves it: never a person's
			}
			k := o.operation + " " + o.env + " " + o.scope
			t := seen[k]
			if t == nil {
				t = &tally{}
				seen[k] = t
			}
			cached := !o.critical() && t.n > 3 && float64(t.ok)/float64(t.n) > 0.9
			if pass == 1 {
				baseline++
				if !cached {
					people++
				}
			}
			t.n++
			if !o.deny && !o.fail {
				t.ok++
			}
		}
	}
	if baseline > 0 {
		cut = 1 - float64(people)/float64(baseline)
	}
	return people, baseline, cut
}
