package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/tools/console"
	heedmcp "github.com/heedhq/heed/tools/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newMCPCmd(g *globals) *cobra.Command {
	var identity, listen, tokens, skillsDir, logLevel, metricsListen string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve heed to AI agents over the Model Context Protocol (stdio, or streamable HTTP with --listen)",
		Long: `heed mcp serves heed's tools to an MCP client: run skills (a paused run is a
result that says what it waits for), continue and retry them, ask people,
ask for permission, propose change sets and read what was decided, check a
tool's known issues and teach fixes (docs/MCP.md).

Without --listen it speaks MCP on stdin and stdout, for a local client's
config; every action carries --identity (default $HEED_IDENTITY, else
agent:mcp). With --listen it serves streamable HTTP at /mcp; each request
needs "Authorization: Bearer <token>", and the token's entry in --tokens
(the console's users file format, token_sha256) is the agent's identity.`,
		Example: `  heed mcp --identity agent:claude --skills skills
  heed mcp --listen 127.0.0.1:8765 --tokens mcp-tokens.yaml --skills skills`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := service.ParseLogLevel(logLevel); err != nil {
				return err
			}
			// Logs go to stderr: stdout is the protocol's.
			log := g.logger(logLevel)
			var users *console.Users
			if tokens != "" && listen == "" {
				return badInput("--tokens is for the HTTP transport (--listen); over stdio the client that starts heed mcp is the caller")
			}
			if listen != "" {
				if tokens == "" {
					return badInput("--listen needs --tokens: who may call, by bearer token (docs/MCP.md)")
				}
				var err error
				if users, err = console.ReadUsers(tokens); err != nil {
					return &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: err.Error()}
				}
			}
			if identity == "" {
				identity = os.Getenv("HEED_IDENTITY")
			}
			if identity == "" {
				identity = "agent:mcp"
			}
			c, err := g.connect(cmd.Context(), heedclient.Name("heed-mcp"), heedclient.Source("heed/mcp"), heedclient.NATSOptions{nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)})
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := serveOps(cmd.Context(), cmd.ErrOrStderr(), metricsListen, "mcp", c.Conn(), log); err != nil {
				return err
			}
			if st, err := os.Stat(skillsDir); err != nil || !st.IsDir() {
				// Not fatal (skills may come later), but an agent listing
				// none should not be the only one to find out.
				abs, _ := filepath.Abs(skillsDir)
				log.Warn("no skills directory: skill_list lists none and skill_run runs none by name (--skills)", "dir", abs)
			}
			cfg := heedmcp.Config{Identity: identity, SkillsDir: skillsDir, Version: currentBuild().Version, Log: log}
			if listen == "" {
				srv := heedmcp.New(c.Client, cfg)
				defer srv.Close()
				err := srv.MCP().Run(cmd.Context(), &mcp.StdioTransport{})
				if err == nil || errors.Is(err, cmd.Context().Err()) || errors.Is(err, mcp.ErrConnectionClosed) {
					return nil
				}
				return err
			}
			addr, done, err := serveMCPHTTP(cmd.Context(), c.Client, cfg, users, listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "heed mcp: streamable HTTP on http://%s/mcp (Ctrl-C to stop)\n", addr)
			return <-done
		},
	}
	cmd.Flags().StringVar(&identity, "identity", "", "the agent's identity, in by of everything it does (stdio; default $HEED_IDENTITY, else agent:mcp)")
	cmd.Flags().StringVar(&listen, "listen", "", "serve streamable HTTP on this host:port instead of stdio")
	cmd.Flags().StringVar(&tokens, "tokens", "", "with --listen: who may call, a users file of token_sha256 entries (docs/MCP.md)")
	cmd.Flags().StringVar(&skillsDir, "skills", "skills", "the skills skill_list lists and skill_run runs by name")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error (on stderr)")
	addMetricsFlag(cmd, &metricsListen)
	return cmd
}

// serveMCPHTTP serves streamable HTTP at /mcp: each caller's bearer token
// names its identity, and each identity gets a server of its own.
func serveMCPHTTP(ctx context.Context, c *heedclient.Client, cfg heedmcp.Config, users *console.Users, listen string) (string, <-chan error, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", nil, &exitError{status: exitUsage, code: events.CodeInvalidRequest, msg: fmt.Sprintf("listen on %s: %v", listen, err)}
	}
	var mu sync.Mutex
	servers := map[string]*heedmcp.Server{}
	serverFor := func(identity string) *mcp.Server {
		mu.Lock()
		defer mu.Unlock()
		s := servers[identity]
		if s == nil {
			c2 := cfg
			c2.Identity = identity
			s = heedmcp.New(c, c2)
			servers[identity] = s
		}
		return s.MCP()
	}
	type identityKey struct{}
	handler := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return serverFor(r.Context().Value(identityKey{}).(string))
	}, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		u, known := users.ByToken(strings.TrimSpace(token))
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="heed"`)
			http.Error(w, "a bearer token of the tokens file is needed", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, u.Identity)))
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		mu.Lock()
		for _, s := range servers {
			s.Close()
		}
		mu.Unlock()
	}()
	return ln.Addr().String(), done, nil
}
