package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Two heed up on one data directory: the second exits at once with exit 2,
// naming the first (its pid and where it listens), and leaves the first
// alone; once the first has stopped, a new one starts on the same data.
func TestUpTwiceOnOneDataDir(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	first := startHeed(t, data, freePort(t))
	for _, want := range []string{
		"export HEED_NATS_URL=" + first.url + "\n",
		"nats context save heed --server " + first.url + " --select\n",
		"nats context save heed-sys --server " + first.url + " --user heed-sys --password \"$(cat " + filepath.Join(data, "nats-system-password") + ")\"\n",
	} {
		if !strings.Contains(first.stdout.String(), want) {
			t.Errorf("heed up does not print the client setting %q:\n%s", want, first.stdout.String())
		}
	}

	other := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	start := time.Now()
	out, errOut, code := runCLI(t, "up", "--data", data, "--nats-listen", other)
	took := time.Since(start)
	pid := strconv.Itoa(first.cmd.Process.Pid)
	if code != 2 || !strings.Contains(errOut, "data directory "+data+" is in use by another heed up (pid "+pid) || !strings.Contains(errOut, "listening on "+first.url) {
		t.Fatalf("second heed up on one data dir: exit %d after %s\nstdout:\n%s\nstderr:\n%s\nwant exit 2 naming pid %s listening on %s", code, took, out, errOut, pid, first.url)
	}
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "heed: ") {
		t.Errorf("the error is not one heed: line:\n%s", errOut)
	}
	if took > time.Second {
		t.Errorf("the second heed up took %s to fail, want under a second", took)
	}
	if strings.Contains(out, "listening") {
		t.Errorf("the second heed up started a server:\n%s", out)
	}
	// In a shell where the printed export was pasted, heed up --data still
	// means an embedded server: it meets the lock instead of running a
	// second set of services on the first one's server.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, heedBin, "up", "--data", data, "--nats-listen", other)
	second.Env = append(childEnv(), "HEED_NATS_URL="+first.url)
	b, err := second.CombinedOutput()
	if second.ProcessState.ExitCode() != 2 || !strings.Contains(string(b), "is in use by another heed up (pid "+pid) || strings.Contains(string(b), "services running") {
		t.Fatalf("heed up --data with HEED_NATS_URL exported: %v\n%s\nwant exit 2 naming the first", err, b)
	}
	// --nats-url with --data is a contradiction, said as such.
	if out, errOut, code := runCLI(t, "--nats-url", first.url, "up", "--data", data); code != 2 || !strings.Contains(errOut, "give one or the other") {
		t.Errorf("heed up --nats-url --data: exit %d\n%s\n%s", code, out, errOut)
	}

	// The first one is untouched: it still answers.
	nc, _ := connect(t, first.url)
	if _, err := nc.Request("heed.svc.indexer.health", nil, 3*time.Second); err != nil {
		t.Fatalf("the first heed up no longer answers: %v", err)
	}
	nc.Close()

	first.stop(syscall.SIGINT)
	again := startHeed(t, data, freePort(t))
	again.stop(syscall.SIGINT)

	// A lock file left by a process killed with -9 blocks nothing: the
	// kernel drops the lock with the process.
	killed := startHeed(t, data, freePort(t))
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-killed.done
	if b, _ := os.ReadFile(filepath.Join(data, lockFileName)); !strings.Contains(string(b), `"pid":`+strconv.Itoa(killed.cmd.Process.Pid)) {
		t.Fatalf("the lock file after kill -9 = %q, want the killed process's record left in it", b)
	}
	startHeed(t, data, freePort(t)).stop(syscall.SIGTERM)
}

// A taken port is reported in under a second, in heed's words, naming the
// address and the flag that changes it; nothing is left behind listening.
func TestUpPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().String()
	for _, c := range []struct {
		name string
		args []string
		flag string
	}{
		{"client", []string{"--nats-listen", taken}, "--nats-listen"},
		{"monitor", []string{"--nats-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))), "--nats-monitor", taken}, "--nats-monitor"},
		{"metrics", []string{"--nats-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))), "--metrics-listen", taken}, "--metrics-listen"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out, errOut, code := runCLI(t, append([]string{"up", "--data", t.TempDir()}, c.args...)...)
			took := time.Since(start)
			want := "heed: conflict: " + taken + " is already in use by another process (another heed up, or a nats-server?): stop it, or choose a free port with " + c.flag + " 127.0.0.1:PORT\n"
			if code != 2 || errOut != want {
				t.Fatalf("heed up on a taken port: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 2 and stderr %q", code, out, errOut, want)
			}
			if took > time.Second {
				t.Errorf("heed up on a taken port took %s to fail, want under a second", took)
			}
		})
	}
}
