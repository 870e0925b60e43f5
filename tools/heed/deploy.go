package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/access"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
)

// defaultDeployUsers are the users `heed deploy permissions` writes when
// none are named: one per service (so the server's connection list says
// which is which) and one of each client role.
var defaultDeployUsers = []string{
	"runner:service", "confirm-router:service", "escalator:service", "healer:service",
	"learner:service", "indexer:service", "changesets:service",
	"agent:agent", "bridge:bridge", "console:console", "ops:ops",
}

var deployUserName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func newDeployCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "Write what a production deployment needs (NATS users and permissions per role)",
		Example: `  heed deploy permissions --out deploy/secrets
  heed deploy permissions --out deploy/secrets --user ci-bot:agent --user slack:bridge`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newDeployPermissionsCmd(g))
	return cmd
}

func newDeployPermissionsCmd(_ *globals) *cobra.Command {
	var out string
	var users []string
	var isolate bool
	cmd := &cobra.Command{
		Use:   "permissions --out DIR [--user NAME:ROLE]... [--isolate-agents]",
		Short: "Write NATS users with heed's role permissions: a server config and one nkey seed per user",
		Long: `Writes DIR/heed-permissions.conf, a nats-server configuration fragment
with one permission set per role (service, agent, bridge, console, ops) and
an authorization block of users authenticated by nkey, and DIR/NAME.nk, each
user's nkey seed (mode 0600). Include the fragment from every server's
configuration; give each program its seed with --nats-nkey (or
$HEED_NATS_NKEY). Running it again keeps the seeds already in DIR, so
credentials handed out stay valid; users no longer named lose access.

Roles:
` + roleHelp() + `
Without --user: one service user per service (runner, confirm-router,
escalator, healer, learner, indexer, changesets) and one user of each
client role (agent, bridge, console, ops). docs/PRODUCTION.md has the
subjects of each role.

With --isolate-agents, agents may not read or steer each other's runs:
each agent user may call the run commands on its own path only
(heed.cmd.as.NAME.run.start, continue, retry, cancel and get; the runner
takes NAME for the caller and refuses other agents' runs with code
forbidden), reads nothing from the log itself, and gets its replies on its
own inboxes (_INBOX.NAME.>; heed's client sets that prefix when it is given
the agent's name, --as-agent NAME). Such an agent cannot drive a run by
writing its events or serve tools: give that agent the plain agent role.`,
		Example: `  heed deploy permissions --out deploy/secrets
  heed deploy permissions --out deploy/secrets --user runner:service --user ci-bot:agent --user slack:bridge --user alice:ops
  heed deploy permissions --out deploy/secrets --user runner:service --user ci-bot:agent --user review-bot:agent --isolate-agents
  nats-server -c node.conf          # node.conf: include heed-permissions.conf
  heed-runner --nats-url nats://n1:4222 --nats-nkey deploy/secrets/runner.nk`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return events.Errorf(events.CodeInvalidRequest, "--out DIR is required: where the configuration and the seeds go")
			}
			if len(users) == 0 {
				users = defaultDeployUsers
			}
			parsed, err := parseDeployUsers(users)
			if err != nil {
				return err
			}
			for i := range parsed {
				parsed[i].Isolated = isolate && parsed[i].Role == access.RoleAgent
			}
			if err := os.MkdirAll(out, 0o700); err != nil {
				return fmt.Errorf("--out %s: %w", out, err)
			}
			var written []access.User
			w := cmd.OutOrStdout()
			for _, u := range parsed {
				pub, created, err := userSeed(filepath.Join(out, u.Name+".nk"))
				if err != nil {
					return err
				}
				u.NKey = pub
				written = append(written, u)
				state := "kept"
				if created {
					state = "new"
				}
				role := u.Role
				if u.Isolated {
					role += " (isolated: heed.cmd.as." + u.Name + ".run.*)"
				}
				fmt.Fprintf(w, "%-16s %-8s %s (%s)\n", u.Name, role, filepath.Join(out, u.Name+".nk"), state)
			}
			conf, err := access.ServerConfig(written)
			if err != nil {
				return events.Errorf(events.CodeInvalidRequest, "%v", err)
			}
			path := filepath.Join(out, "heed-permissions.conf")
			if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(w, "wrote %s: include it from each NATS server's configuration; give each program its seed with --nats-nkey\n", path)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory for heed-permissions.conf and the seeds (created, mode 0700)")
	cmd.Flags().StringArrayVar(&users, "user", nil, "NAME:ROLE, repeatable (roles: "+strings.Join(access.RoleNames(), ", ")+")")
	cmd.Flags().BoolVar(&isolate, "isolate-agents", false, "keep each agent to its own runs (run commands on heed.cmd.as.NAME.run.* only; no reads of the log)")
	_ = cmd.MarkFlagDirname("out")
	return cmd
}

func roleHelp() string {
	var b strings.Builder
	for _, r := range access.Roles() {
		fmt.Fprintf(&b, "  %-8s %s\n", r.Name, r.Doc)
	}
	return b.String()
}

// parseDeployUsers reads NAME:ROLE values: names unique and safe as file
// names, roles known.
func parseDeployUsers(values []string) ([]access.User, error) {
	seen := map[string]bool{}
	var out []access.User
	for _, v := range values {
		name, role, ok := strings.Cut(v, ":")
		if !ok || name == "" || role == "" {
			return nil, events.Errorf(events.CodeInvalidRequest, "--user %q: write NAME:ROLE, e.g. ci-bot:agent", v)
		}
		if !deployUserName.MatchString(name) {
			return nil, events.Errorf(events.CodeInvalidRequest, "--user %q: a name is lower-case letters, digits, - and _ (it names the seed file)", v)
		}
		if _, ok := access.RoleNamed(role); !ok {
			return nil, events.Errorf(events.CodeInvalidRequest, "--user %q: no role %q (roles: %s)", v, role, strings.Join(access.RoleNames(), ", "))
		}
		if seen[name] {
			return nil, events.Errorf(events.CodeInvalidRequest, "--user %q: %s is named twice", v, name)
		}
		seen[name] = true
		out = append(out, access.User{Name: name, Role: role})
	}
	return out, nil
}

// userSeed returns the public key of the user nkey seed at path, creating
// the seed (mode 0600) when there is none.
func userSeed(path string) (pub string, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			return "", false, fmt.Errorf("%s: not an nkey seed: %w", path, err)
		}
		pub, err := kp.PublicKey()
		if err != nil || !strings.HasPrefix(pub, "U") {
			return "", false, fmt.Errorf("%s: not a user nkey seed", path)
		}
		return pub, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", false, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", false, err
	}
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		return "", false, err
	}
	pub, err = kp.PublicKey()
	return pub, true, err
}
