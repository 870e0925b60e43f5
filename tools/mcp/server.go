// Package heedmcp is heed's Model Context Protocol server: AI agents in
// MCP clients run skills, are told when a run waits for them and why a
// step failed, continue and retry with corrected args (which heed learns),
// ask people questions, ask for permission, propose change sets and read
// what was decided (docs/MCP.md). It speaks only the client package, and
// every action carries the agent's identity in by.
package heedmcp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/skill"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Channel is what answers given through MCP name.
const Channel = "mcp"

// Config configures a server.
type Config struct {
	// Identity is the agent's: what its actions carry in by.
	Identity string
	// SkillsDir holds the skills skill_list lists and skill_run runs by
	// name (default: skills).
	SkillsDir string
	Version   string
	Log       *slog.Logger
}

// Server is heed's MCP server over one client.
type Server struct {
	c   *heedclient.Client
	cfg Config
	log *slog.Logger
	srv *mcp.Server

	mu   sync.Mutex
	subs map[string]func() // resource URI → stops its watch
}

// New builds the MCP server with every tool and resource.
func New(c *heedclient.Client, cfg Config) *Server {
	if cfg.SkillsDir == "" {
		cfg.SkillsDir = "skills"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Server{c: c, cfg: cfg, log: cfg.Log, subs: map[string]func(){}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "heed", Title: "heed: a human (or an AI) in the loop", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		SubscribeHandler: func(ctx context.Context, req *mcp.SubscribeRequest) error {
			return s.subscribe(req.Params.URI)
		},
		UnsubscribeHandler: func(ctx context.Context, req *mcp.UnsubscribeRequest) error {
			s.unsubscribe(req.Params.URI)
			return nil
		},
	})
	s.addTools()
	s.addResources()
	return s
}

// MCP is the protocol server, to run on a transport.
func (s *Server) MCP() *mcp.Server { return s.srv }

// Close ends the resource subscriptions.
func (s *Server) Close() {
	s.mu.Lock()
	stops := s.subs
	s.subs = map[string]func(){}
	s.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

const instructions = `heed runs skills (YAML workflows of tool calls) as event-sourced runs that
pause for confirmations, heals tool failures and learns. Start with
skill_list, run with skill_run (wait_s to wait for it). A run that pauses is
a result, not an error: it says what it waits for and what to call next
(skill_continue with a choice; skill_retry_step with corrected args when a
step failed; skill_cancel). Before calling a tool yourself, check_known_issues.
Ask a person directly with confirmation_request; ask for permission for a
risky operation with escalation_request, and check session_can_continue
before starting more. Propose changes a person should agree to with
change_set_propose, and read decision_history at the start of your next
wake.`

// skills lists the skill files of the skills directory by name.
func (s *Server) skills() (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(s.cfg.SkillsDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	more, _ := filepath.Glob(filepath.Join(s.cfg.SkillsDir, "*.yml"))
	out := map[string]string{}
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sk, err := skill.Load(f, b)
		if err != nil {
			continue // not a skill (a tools file), or broken: skill_run says why when asked
		}
		out[sk.Name] = f
	}
	return out, nil
}

// skillSource finds a skill by name, or by a file path inside the skills
// directory.
func (s *Server) skillSource(name string) (source, file string, err error) {
	known, err := s.skills()
	if err != nil {
		return "", "", err
	}
	file, ok := known[name]
	if !ok {
		p := filepath.Clean(filepath.Join(s.cfg.SkillsDir, name))
		if rel, rerr := filepath.Rel(s.cfg.SkillsDir, p); rerr == nil && !strings.HasPrefix(rel, "..") {
			if _, serr := os.Stat(p); serr == nil {
				file, ok = p, true
			}
		}
	}
	if !ok {
		names := make([]string, 0, len(known))
		for n := range known {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", "", events.Errorf(events.CodeNotFound, "no skill %q (skill_list lists them: %s)", name, strings.Join(names, ", "))
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", "", err
	}
	return string(b), file, nil
}

// toolError turns a heed error into the message an agent reads.
func toolError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %s", events.CodeOf(err), events.Message(err))
}
