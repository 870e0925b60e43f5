package command

import (
	"strings"

	"github.com/heedhq/heed/events"
)

// The run commands on an agent's own path: heed.cmd.as.<agent>.run.start
// (continue, retry, cancel, get) is heed.cmd.run.start called by <agent>.
// A deployment that keeps agents from reading each other's runs gives an
// agent user permission to publish on its own path only (heed deploy
// permissions --isolate-agents), so the token is who calls: a run started
// there belongs to that agent, and the other commands there refuse, with
// code forbidden, a run that belongs to someone else.
const AgentPrefix = events.CommandPrefix + ".as"

// AgentRunCommands are the run commands an agent's path serves.
func AgentRunCommands() []string { return []string{RunStart, RunContinue, RunRetry, RunCancel, RunGet} }

// AsAgent is the subject of command subject on agent's own path.
func AsAgent(agent, subject string) string {
	return AgentPrefix + "." + agent + strings.TrimPrefix(subject, events.CommandPrefix)
}

// AgentOf splits a subject on an agent's path into the agent and the
// command's own subject.
func AgentOf(subject string) (agent, base string, ok bool) {
	rest, ok := strings.CutPrefix(subject, AgentPrefix+".")
	if !ok {
		return "", "", false
	}
	agent, rest, ok = strings.Cut(rest, ".")
	if !ok || !events.ValidID(agent) {
		return "", "", false
	}
	return agent, events.CommandPrefix + "." + rest, true
}

// AgentInboxPrefix is the prefix of an agent's reply subjects on a
// deployment that isolates agents: its replies (run events among them)
// come to _INBOX.<agent>.>, which no other agent may subscribe to.
func AgentInboxPrefix(agent string) string { return "_INBOX." + agent }
