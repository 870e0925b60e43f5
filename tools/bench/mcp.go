package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"

	heedclient "github.com/heedhq/heed/client"
	heedmcp "github.com/heedhq/heed/tools/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP workload (issue 18): what a tool call costs over the command it
// wraps. The same question (session_can_continue, which is
// heed.cmd.escalation.held) is asked 1,000 times each way, one at a time,
// against heed up in its own process.
const (
	mcpCalls          = 1000
	targetMCPOverhead = time.Millisecond
)

func runMCP(ctx context.Context, env *benchEnv) (*result, error) {
	up, err := startUp(ctx, env)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	c, err := heedclient.Connect(ctx, up.url)
	if err != nil {
		return nil, err
	}
	defer c.Close()

	time1 := func(f func() error) ([]time.Duration, error) {
		out := make([]time.Duration, 0, mcpCalls)
		for i := range mcpCalls + 100 {
			s := time.Now()
			if err := f(); err != nil {
				return nil, err
			}
			if i >= 100 { // the first 100 warm up
				out = append(out, time.Since(s))
			}
		}
		slices.Sort(out)
		return out, nil
	}
	direct, err := time1(func() error { _, err := c.Held(ctx, "agent:bench"); return err })
	if err != nil {
		return nil, err
	}

	// In the bench's process, over the SDK's in-memory transport: the
	// protocol's own cost (JSON-RPC, schema validation, the result).
	srv := heedmcp.New(c, heedmcp.Config{Identity: "agent:bench"})
	defer srv.Close()
	st, ct := mcp.NewInMemoryTransports()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = srv.MCP().Run(sctx, st) }()
	client := mcp.NewClient(&mcp.Implementation{Name: "heed-bench", Version: "1"}, nil)
	mem, err := client.Connect(ctx, ct, nil)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	call := func(s *mcp.ClientSession) func() error {
		return func() error {
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "session_can_continue"})
			if err == nil && res.IsError {
				err = fmt.Errorf("tool error: %v", res.Content)
			}
			return err
		}
	}
	inMem, err := time1(call(mem))
	if err != nil {
		return nil, err
	}

	// As a client uses it: heed mcp as a child process over stdio.
	bin, err := heedBinary(env.cfg.heedBin)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "mcp", "--nats-url", up.url, "--identity", "agent:bench")
	cmd.Env = os.Environ()
	stdio, err := mcp.NewClient(&mcp.Implementation{Name: "heed-bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, err
	}
	defer stdio.Close()
	overStdio, err := time1(call(stdio))
	if err != nil {
		return nil, err
	}

	p50 := func(x []time.Duration) time.Duration { return percentile(x, 50) }
	overMem, overPipe := p50(inMem)-p50(direct), p50(overStdio)-p50(direct)
	res := &result{tables: []table{{
		caption: fmt.Sprintf("A tool call against the command it wraps: session_can_continue (heed.cmd.escalation.held), %s calls each, one at a time, against `heed up` in its own process", thousands(mcpCalls)),
		columns: []string{"measure", "p50", "p99", "overhead (p50)", "target", "verdict"},
		rows: [][]string{
			{"the command, through the client package", micros(p50(direct)), micros(percentile(direct, 99)), "", "", ""},
			{"the tool, MCP in process (the SDK's in-memory transport)", micros(p50(inMem)), micros(percentile(inMem, 99)), micros(overMem), "< 1 ms", passMiss(overMem < targetMCPOverhead)},
			{"the tool, heed mcp over stdio (a child process, as clients run it)", micros(p50(overStdio)), micros(percentile(overStdio, 99)), micros(overPipe), "< 1 ms", passMiss(overPipe < targetMCPOverhead)},
		},
	}}}
	res.missed = overMem >= targetMCPOverhead || overPipe >= targetMCPOverhead
	res.notes = append(res.notes, "Overhead is the tool's p50 less the command's: JSON-RPC framing, the input schema's validation, the structured result, and for stdio the pipes and a second NATS connection in heed mcp.")
	return res, nil
}
