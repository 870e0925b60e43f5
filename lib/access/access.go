// Package access is who may publish and subscribe to what in a heed
// deployment: one role per kind of client (service, agent, approver
// bridge, console, ops), each a NATS permission set, and the nats-server
// configuration that gives every user its role (`heed deploy
// permissions`, docs/PRODUCTION.md).
//
// The roles follow heed's contract: the log's subjects (heed.run.>,
// heed.confirm.>, …) are written by heed's services and, for the runs an
// agent drives itself, by that agent; people's answers and decisions go
// through commands (heed.cmd.confirm.answer, heed.cmd.changeset.decide),
// which the services check; reading the log is JetStream's read API.
package access

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
)

// Permissions is one direction of a role: subjects allowed and, within
// them, denied (NATS applies deny after allow).
type Permissions struct {
	Allow []string
	Deny  []string
}

// Role is a NATS permission set with a name and what it is for.
type Role struct {
	Name      string
	Doc       string
	Publish   Permissions
	Subscribe Permissions
	// Responses lets the role reply to requests sent to it (presence
	// checks, tools it serves) without a publish permission on every
	// inbox.
	Responses bool
}

// The roles' names.
const (
	RoleService = "service"
	RoleAgent   = "agent"
	RoleBridge  = "bridge"
	RoleConsole = "console"
	RoleOps     = "ops"
)

// readLog is JetStream's read API on heed's streams and buckets: stream
// info, direct gets (histories, bucket values), message gets and the
// ordered consumers that watch (created and fetched, never deleted by
// hand: they go when inactive). Creating a consumer is allowed on
// HEED_EVENTS and the read-model buckets' streams only.
var readLog = append([]string{
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.*",
	"$JS.API.STREAM.NAMES",
	"$JS.API.STREAM.LIST",
	"$JS.API.DIRECT.GET.>",
	"$JS.API.STREAM.MSG.GET.*",
	"$JS.API.CONSUMER.CREATE." + events.EventStream,
	"$JS.API.CONSUMER.CREATE." + events.EventStream + ".>",
	"$JS.API.CONSUMER.MSG.NEXT.*.*",
	"$JS.API.CONSUMER.INFO.*.*",
	"$JS.FC.>",
}, bucketConsumers()...)

// bucketConsumers allow watching the read-model buckets (a KV watch is
// an ordered consumer on the bucket's stream). Subject wildcards are
// whole tokens, so each bucket is named.
func bucketConsumers() []string {
	var out []string
	for _, b := range readmodel.Buckets() {
		out = append(out, "$JS.API.CONSUMER.CREATE.KV_"+b.Name, "$JS.API.CONSUMER.CREATE.KV_"+b.Name+".>")
	}
	return out
}

// watchLog is what a reader of the log subscribes to: its replies and
// the events themselves (core NATS, as `nats sub` does).
var watchLog = []string{"_INBOX.>", "heed.run.>", "heed.confirm.>", "heed.escalation.>", "heed.changeset.>", "heed.pref.>", "heed.fix.>"}

// logWrites are the subjects of the log: only heed's services (and an
// agent, for the runs it drives) write them.
var logWrites = []string{"heed.run.>", "heed.confirm.>", "heed.pref.>", "heed.fix.>", "heed.escalation.>", "heed.changeset.>", "heed.schedule.>", "heed.dlq.>"}

// opsReads are what an operator's read-only tools ask of JetStream beyond
// a reader's: following the dead letters (heed events tail 'heed.dlq.>',
// an ordered consumer on HEED_DLQ) and listing the consumers (nats
// consumer ls, nats consumer report).
var opsReads = []string{
	"$JS.API.CONSUMER.CREATE." + events.DLQStream,
	"$JS.API.CONSUMER.CREATE." + events.DLQStream + ".>",
	"$JS.API.CONSUMER.NAMES.*",
	"$JS.API.CONSUMER.LIST.*",
}

// ServiceDurables are the durable consumers heed's services keep on the
// event stream (conformance checks the list against a running heed).
// JetStream's consumer create is create-or-update: a role allowed to
// create consumers on the stream (to follow the log) could otherwise
// rewrite one of these (its filter, its ack wait) by name, and stop a
// service or make it skip what it must see.
var ServiceDurables = []string{
	"changesets", "confirm-router", "confirm-router-answers", "confirm-router-deadlines", "escalator", "healer",
	"proj-changesets", "proj-decisions", "proj-escalations", "proj-fixes", "proj-index", "proj-patterns", "proj-prefs", "proj-stats",
	"runner", "runner-changesets",
}

// durableWrites deny the consumer creates that name a service's durable.
func durableWrites() []string {
	var out []string
	for _, d := range ServiceDurables {
		out = append(out, "$JS.API.CONSUMER.CREATE."+events.EventStream+"."+d, "$JS.API.CONSUMER.CREATE."+events.EventStream+"."+d+".>",
			"$JS.API.CONSUMER.DURABLE.CREATE."+events.EventStream+"."+d)
	}
	return out
}

// runEventsNotAgents are the run events (heed.run.>, which an agent
// writes for the runs it drives) that only heed's services write: the
// catalog's run types whose producers do not include an agent. A heal's
// verdict (heal.healed, heal.gave_up) scores a learned fix and feeds the
// statistics; a run's requested event carries the skill the runner was
// asked for; abandoned and warning are the runner's. An agent that wrote
// them would move learned state without running anything.
func runEventsNotAgents() []string {
	var out []string
	for _, ti := range events.Catalog() {
		if ti.Type.Kind() != "run" || slices.Contains(ti.Producers, "agent") {
			continue
		}
		out = append(out, ti.Type.Subject("*"))
	}
	return out
}

// readCommands are the commands that only read.
var readCommands = []string{"heed.cmd.run.get", "heed.cmd.escalation.status", "heed.cmd.escalation.held", "heed.cmd.changeset.status", "heed.cmd.changeset.list", "heed.cmd.changeset.history"}

// health is the services' health and `nats micro` discovery.
var health = []string{"heed.svc.*.health", "heed.svc.*.standby", "$SRV.>"}

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// Roles are heed's roles, in the order they are documented.
func Roles() []Role {
	return []Role{
		{
			Name:      RoleService,
			Doc:       "heed's services (runner, confirm router, escalator, healer, learner, indexer, changesets): they provision the streams and buckets, write the log and serve the commands",
			Publish:   Permissions{Allow: []string{">"}, Deny: []string{"$SYS.>"}},
			Subscribe: Permissions{Allow: []string{">"}, Deny: []string{"$SYS.>"}},
			Responses: true,
		},
		{
			Name: RoleAgent,
			Doc:  "an agent: starts, continues, retries and cancels runs, asks for confirmations and escalations and reports their outcomes, proposes change sets, teaches fixes, writes the events of the runs it drives itself and serves tools (heed.tool.>); it cannot answer a confirmation, decide a change set or write any other event",
			Publish: Permissions{
				Allow: join([]string{"heed.cmd.run.>", "heed.cmd.confirm.request", "heed.cmd.fix.learn",
					"heed.cmd.escalation.request", "heed.cmd.escalation.outcome", "heed.cmd.changeset.propose",
					"heed.run.>"}, readCommands, readLog, health),
				Deny: join(durableWrites(), runEventsNotAgents()),
			},
			Subscribe: Permissions{Allow: join(watchLog, []string{"heed.tool.>"})},
			Responses: true,
		},
		{
			Name: RoleBridge,
			Doc:  "an approver bridge (desktop, chat): answers confirmations and decides change sets through their commands only, answers presence checks, reads what it shows",
			Publish: Permissions{
				Allow: join([]string{"heed.cmd.confirm.answer", "heed.cmd.changeset.decide"}, readCommands, readLog, health),
				Deny:  durableWrites(),
			},
			Subscribe: Permissions{Allow: join(watchLog, []string{"heed.presence.>"})},
			Responses: true,
		},
		{
			Name: RoleConsole,
			Doc:  "the web console: a bridge that also cancels runs, forgets learned preferences and fixes (a person's decision, written as heed.pref.<id>.forgotten or through heed.cmd.fix.forget)",
			Publish: Permissions{
				Allow: join([]string{"heed.cmd.confirm.answer", "heed.cmd.changeset.decide", "heed.cmd.run.cancel", "heed.cmd.fix.forget", "heed.pref.*.forgotten"},
					readCommands, readLog, health),
				Deny: durableWrites(),
			},
			Subscribe: Permissions{Allow: join(watchLog, []string{"heed.presence.>"})},
			Responses: true,
		},
		{
			Name:      RoleOps,
			Doc:       "operators with the nats CLI: read every stream, bucket and subject, ask the services' health and the read-only commands, and write nothing (no event, answer, decision or stream change)",
			Publish:   Permissions{Allow: join(readCommands, readLog, opsReads, health), Deny: durableWrites()},
			Subscribe: Permissions{Allow: []string{">"}, Deny: []string{"$SYS.>"}},
		},
	}
}

// RoleNamed returns the named role.
func RoleNamed(name string) (Role, bool) {
	for _, r := range Roles() {
		if r.Name == name {
			return r, true
		}
	}
	return Role{}, false
}

// RoleNames are the roles' names.
func RoleNames() []string {
	var out []string
	for _, r := range Roles() {
		out = append(out, r.Name)
	}
	return out
}

// LogWrites are the subjects of heed's log, which only services (and
// agents, for their runs) may publish on.
func LogWrites() []string { return append([]string(nil), logWrites...) }

// User is one NATS user of a deployment and its role; exactly one of
// NKey (a public user nkey, "U…") and Password (a bcrypt hash or a plain
// password) authenticates it.
type User struct {
	Name     string
	Role     string
	NKey     string
	Password string
	// Isolated keeps an agent to its own runs (IsolatedAgent).
	Isolated bool
}

// IsolatedAgent is the agent role for a deployment whose agents may not
// read (or steer) each other's runs. Run subjects do not name their agent,
// so the agent reads nothing from the log itself: it starts, follows
// (heed.cmd.run.get, a long poll) and steers its runs through the run
// commands on its own path, heed.cmd.as.<name>.run.*, where the runner
// takes the subject's name for the caller and refuses other agents' runs.
// Its replies come to its own inboxes (_INBOX.<name>.>; heed's client sets
// that prefix with client.Agent), so no other agent sees them. What it
// gives up against the agent role: reading the log and the read models,
// the read-only commands (escalation and change set status, lists and
// history), driving runs by writing their events, and serving tools.
// It keeps asking for confirmations and escalations, reporting their
// outcomes, proposing change sets and teaching fixes.
func IsolatedAgent(name string) Role {
	return Role{
		Name: RoleAgent,
		Doc:  "an agent kept to its own runs: run commands on heed.cmd.as." + name + ".run.* only, no reads of the log",
		Publish: Permissions{
			Allow: join([]string{command.AsAgent(name, events.CommandPrefix+".run.>"), "heed.cmd.confirm.request", "heed.cmd.fix.learn",
				"heed.cmd.escalation.request", "heed.cmd.escalation.outcome", "heed.cmd.changeset.propose"}, health),
		},
		Subscribe: Permissions{Allow: []string{command.AgentInboxPrefix(name) + ".>"}},
	}
}

// ServerConfig is the nats-server configuration fragment that gives each
// user its role: one permission variable per role used and an
// authorization block. Include it from the server's configuration
// (`include heed-permissions.conf`) or paste it in.
func ServerConfig(users []User) (string, error) {
	var b strings.Builder
	b.WriteString("# heed's roles and users, written by `heed deploy permissions`.\n")
	b.WriteString("# Every user has exactly one role; see docs/PRODUCTION.md.\n\n")
	used := map[string]bool{}
	for _, u := range users {
		if _, ok := RoleNamed(u.Role); !ok {
			return "", fmt.Errorf("user %s: unknown role %q (roles: %s)", u.Name, u.Role, strings.Join(RoleNames(), ", "))
		}
		if (u.NKey == "") == (u.Password == "") {
			return "", fmt.Errorf("user %s: give an nkey or a password, one of them", u.Name)
		}
		if u.Isolated {
			if u.Role != RoleAgent {
				return "", fmt.Errorf("user %s: only an agent is isolated (its role is %s)", u.Name, u.Role)
			}
			if !events.ValidID(u.Name) {
				return "", fmt.Errorf("user %s: an isolated agent's name is one subject token: letters, digits, - and _, starting with a letter or digit", u.Name)
			}
			continue // its permissions are its own, written with it
		}
		used[u.Role] = true
	}
	for _, r := range Roles() {
		if !used[r.Name] {
			continue
		}
		fmt.Fprintf(&b, "# %s: %s\n", r.Name, r.Doc)
		fmt.Fprintf(&b, "HEED_ROLE_%s = {\n", strings.ToUpper(r.Name))
		writePerm(&b, "publish", r.Publish)
		writePerm(&b, "subscribe", r.Subscribe)
		if r.Responses {
			b.WriteString("  allow_responses: true\n")
		}
		b.WriteString("}\n\n")
	}
	b.WriteString("authorization {\n  users: [\n")
	sorted := append([]User(nil), users...)
	sort.SliceStable(sorted, func(i, j int) bool { return roleIndex(sorted[i].Role) < roleIndex(sorted[j].Role) })
	for _, u := range sorted {
		role := "$HEED_ROLE_" + strings.ToUpper(u.Role)
		if u.Isolated {
			var p strings.Builder
			p.WriteString("{\n")
			ia := IsolatedAgent(u.Name)
			writePerm(&p, "publish", ia.Publish)
			writePerm(&p, "subscribe", ia.Subscribe)
			p.WriteString("    }")
			role = strings.ReplaceAll(p.String(), "\n  ", "\n      ")
			u.Role += ", isolated: its own runs only"
		}
		if u.NKey != "" {
			fmt.Fprintf(&b, "    # %s (%s)\n    { nkey: %s, permissions: %s }\n", u.Name, u.Role, u.NKey, role)
		} else {
			fmt.Fprintf(&b, "    # %s (%s)\n    { user: %s, password: %s, permissions: %s }\n", u.Name, u.Role, quote(u.Name), quote(u.Password), role)
		}
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func roleIndex(name string) int {
	for i, r := range Roles() {
		if r.Name == name {
			return i
		}
	}
	return len(Roles())
}

func writePerm(b *strings.Builder, dir string, p Permissions) {
	fmt.Fprintf(b, "  %s: {\n    allow: [%s]\n", dir, quoteAll(p.Allow))
	if len(p.Deny) > 0 {
		fmt.Fprintf(b, "    deny: [%s]\n", quoteAll(p.Deny))
	}
	b.WriteString("  }\n")
}

func quoteAll(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
