package main

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The MCP server as its own process, supervised as a service is: its
// --metrics-listen endpoint says ok and shows the NATS connection while
// heed runs, and degraded (503, with the reason) once NATS is gone.
func TestClientProgramHealthAndMetrics(t *testing.T) {
	h := startHeed(t, t.TempDir(), freePort(t))
	cmd := exec.Command(heedBin, "mcp", "--nats-url", h.url, "--metrics-listen", "127.0.0.1:0")
	cmd.Env = childEnv()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe() // the protocol's: kept open, so the server runs
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	})
	addrRE := regexp.MustCompile(`heed mcp: health and metrics on (http://\S+)`)
	var base string
	checkFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		m := addrRE.FindStringSubmatch(stderr.String())
		if m == nil {
			return fmt.Errorf("no metrics address yet:\n%s", stderr.String())
		}
		base = m[1]
		return nil
	})
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Fatalf("/healthz while connected: %d %s", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `heed_client_nats_connected{program="mcp"} 1`) || !strings.Contains(body, "process_resident_memory_bytes") {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	h.stop(syscall.SIGTERM) // NATS goes with heed up
	checkFor(t, 15*time.Second, 50*time.Millisecond, func() error {
		if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "not connected to NATS") {
			return fmt.Errorf("/healthz without NATS: %d %s", code, body)
		}
		return nil
	})
	if _, body := get("/metrics"); !strings.Contains(body, `heed_client_nats_connected{program="mcp"} 0`) {
		t.Errorf("/metrics without NATS:\n%s", body)
	}
}
