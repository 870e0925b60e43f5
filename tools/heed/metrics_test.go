package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const probeTools = `tools:
  say:
    description: Print a JSON object
    command: /bin/echo
    args: ['{"ok": true}']
    timeout: 5s
`

const probeSkill = `name: metrics_probe
description: A tool step, a confirmation, a tool step.
steps:
  - name: first
    tool: say
  - name: ask
    confirm:
      message: Go on?
      options:
        - {label: Go, value: proceed}
        - {label: Stop, value: cancel}
      default: cancel
  - name: second
    tool: say
`

// scrape reads a Prometheus text exposition: series (name and labels, as
// printed) to value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("bad line %q", l)
		}
		out[l[:i]] = v
	}
	return out
}

// sum adds the series of family name whose labels include every one of
// labels (each `key="value"`); it reports whether there was any.
func sum(m map[string]float64, name string, labels ...string) (float64, bool) {
	var total float64
	found := false
series:
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue series
			}
		}
		total += v
		found = true
	}
	return total, found
}

// TestMetricsMoveUnderLoad runs heed up with --metrics-listen and
// --nats-monitor, puts a small load through it (runs with tool steps and
// confirmations, a deadline that fires, a confirmation left pending, bad
// messages) and scrapes /metrics twice: every heed_* family is there and
// moves with the load. Then a restart counts the runs from the index, and
// the system user can run `nats server report jetstream`.
func TestMetricsMoveUnderLoad(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	toolsFile, skillFile := filepath.Join(dir, "tools.yaml"), filepath.Join(dir, "probe.yaml")
	if err := os.WriteFile(toolsFile, []byte(probeTools), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(skillFile, []byte(probeSkill), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	monitorAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	args := []string{"up", "--data", data, "--nats-listen", listen, "--tools", toolsFile, "--metrics-listen", metricsAddr, "--nats-monitor", monitorAddr}
	p := startProc(t, "heed up", args...)
	p.waitOutput("ready", 30*time.Second)
	url, metricsURL := "nats://"+listen, "http://"+metricsAddr+"/metrics"
	_, js := connect(t, url)

	run := func() {
		out, errOut, code := runCLI(t, "--nats-url", url, "run", skillFile, "-y")
		if code != 0 {
			t.Fatalf("heed run: exit %d\n%s\n%s", code, out, errOut)
		}
	}
	request := func(id string, timeoutS float64) {
		ev, err := events.NewEvent(events.ConfirmRequested, id, id+"/requested", "heed-e2e-test",
			map[string]any{"message": "Proceed?", "options": []map[string]string{{"label": "Yes", "value": "yes"}, {"label": "No", "value": "no"}}, "default": "no", "requester": "heed-e2e-test", "timeout_s": timeoutS})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := events.EncodeUnchecked(&ev)
		if err != nil {
			t.Fatal(err)
		}
		publish(t, js, msg)
	}
	garbage := func(i int) {
		publish(t, js, &nats.Msg{Subject: fmt.Sprintf("heed.run.garbage-%d.started", i), Data: []byte("not an event")})
	}

	// First round.
	run()
	request("metrics-deadline-1", 1)
	request("metrics-pending", 3600)
	garbage(1)
	var first map[string]float64
	want := func(m map[string]float64, name string, atLeast float64, labels ...string) error {
		v, ok := sum(m, name, labels...)
		if !ok {
			return fmt.Errorf("no series %s%v", name, labels)
		}
		if v < atLeast {
			return fmt.Errorf("%s%v = %v, want at least %v", name, labels, v, atLeast)
		}
		return nil
	}
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		first = scrape(t, metricsURL)
		for _, err := range []error{
			want(first, "heed_events_published_total", 1, `type="heed.run.requested"`, `service="runner"`),
			want(first, "heed_events_consumed_total", 1, `outcome="acked"`, `consumer="proj-index"`),
			want(first, "heed_events_consumed_total", 1, `outcome="dead_lettered"`, `consumer="proj-index"`),
			want(first, "heed_dead_letters_total", 1, `code="undecodable"`),
			want(first, "heed_consumer_lag", 0, `consumer="proj-index"`),
			want(first, "heed_consumer_lag", 0, `consumer="runner"`),
			want(first, "heed_consumer_lag", 0, `consumer="confirm-router-deadlines"`),
			want(first, "heed_confirmations_pending", 1),
			want(first, "heed_deadlines_fired_total", 1, `outcome="expired"`),
			want(first, "heed_answer_latency_seconds_count", 1, `method="override"`),
			want(first, "heed_answer_latency_seconds_count", 1, `method="timeout"`),
			want(first, "heed_step_latency_seconds_count", 2, `tool="say"`, `outcome="completed"`),
			want(first, "heed_runs", 1, `state="completed"`),
			want(first, "heed_service_healthy", 5),
			want(first, "process_resident_memory_bytes", 1),
			want(first, "go_goroutines", 1),
		} {
			if err != nil {
				return err
			}
		}
		return nil
	})
	// Second round: every family moves.
	run()
	request("metrics-deadline-2", 1)
	garbage(2)
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		m := scrape(t, metricsURL)
		moved := func(name string, by float64, labels ...string) error {
			a, _ := sum(first, name, labels...)
			return want(m, name, a+by, labels...)
		}
		for _, err := range []error{
			moved("heed_events_published_total", 1, `type="heed.run.requested"`),
			moved("heed_events_consumed_total", 10, `outcome="acked"`),
			moved("heed_dead_letters_total", 1),
			moved("heed_deadlines_fired_total", 1),
			moved("heed_answer_latency_seconds_count", 2),
			moved("heed_step_latency_seconds_count", 2),
			moved("heed_runs", 1, `state="completed"`),
		} {
			if err != nil {
				return err
			}
		}
		if v, _ := sum(m, "heed_confirmations_pending"); v != 1 {
			return fmt.Errorf("heed_confirmations_pending = %v, want 1 (one left open)", v)
		}
		return nil
	})
	// The durables are polled: each is there.
	if v, ok := sum(first, "heed_consumer_up", `consumer="proj-index"`); !ok || v != 1 {
		t.Errorf("heed_consumer_up{proj-index} = %v, %v", v, ok)
	}

	// The embedded server's monitoring and system account.
	resp, err := http.Get("http://" + monitorAddr + "/jsz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /jsz: %v %v", resp, err)
	}
	resp.Body.Close()
	pass, err := os.ReadFile(filepath.Join(data, "nats-system-password"))
	if err != nil {
		t.Fatal(err)
	}
	sys, err := nats.Connect(url, nats.UserInfo(embedded.SystemUser, strings.TrimSpace(string(pass))))
	if err != nil {
		t.Fatalf("connect as the system user: %v", err)
	}
	defer sys.Close()
	reply, err := sys.Request("$SYS.REQ.SERVER.PING.JSZ", []byte(`{"streams":true}`), 3*time.Second)
	if err != nil {
		t.Fatalf("JSZ as the system user: %v", err)
	}
	var jsz struct {
		Data struct {
			Streams int `json:"streams"`
		} `json:"data"`
	}
	if err := json.Unmarshal(reply.Data, &jsz); err != nil || jsz.Data.Streams < 2 {
		t.Fatalf("JSZ: %v %s", err, reply.Data)
	}
	if natsCLI, err := exec.LookPath("nats"); err == nil || fileExists(filepath.Join(os.Getenv("HOME"), "go", "bin", "nats")) {
		if natsCLI == "" {
			natsCLI = filepath.Join(os.Getenv("HOME"), "go", "bin", "nats")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, natsCLI, "--server", url, "--user", embedded.SystemUser, "--password", strings.TrimSpace(string(pass)), "server", "report", "jetstream").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "JetStream Summary") {
			t.Errorf("nats server report jetstream: %v\n%s", err, out)
		}
	} else {
		t.Log("natscli not installed: nats server report jetstream not tried")
	}

	// A restart counts the runs from the index before anything moves.
	p.stop(syscall.SIGINT)
	p = startProc(t, "heed up again", args...)
	p.waitOutput("ready", 30*time.Second)
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		m := scrape(t, metricsURL)
		if err := want(m, "heed_runs", 2, `state="completed"`); err != nil {
			return err
		}
		if v, _ := sum(m, "heed_confirmations_pending"); v != 1 {
			return fmt.Errorf("heed_confirmations_pending = %v after a restart, want 1", v)
		}
		return nil
	})
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestHealthWhenDurableDeleted deletes the index projection's durable (as
// `nats consumer rm` does) while events flow: within seconds `heed status`
// says the indexer is degraded and why, and exits 1; then the durable is
// back and it exits 0; and the index equals a rebuild from the log
// (`heed replay`): nothing was lost.
func TestHealthWhenDurableDeleted(t *testing.T) {
	t.Parallel()
	h := startHeed(t, t.TempDir(), freePort(t))
	_, js := connect(t, h.url)
	status := func() (string, int) {
		out, errOut, code := runCLI(t, "--nats-url", h.url, "status")
		return out + errOut, code
	}
	if out, code := status(); code != 0 {
		t.Fatalf("heed status before: exit %d\n%s", code, out)
	}
	stop, done := make(chan struct{}), make(chan int, 1)
	var stopOnce sync.Once
	stopFlow := func() { stopOnce.Do(func() { close(stop) }) }
	// A test that ends early (a Fatal) stops the flow before its
	// connection closes: a publish error after the end would panic.
	t.Cleanup(func() { stopFlow(); <-done; done <- 0 })
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n++
			if _, err := js.PublishMsg(context.Background(), rawStepFailedMsg(fmt.Sprintf("flow-%d", n), fmt.Sprintf("flow-%d-e", n))); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond) // a steady flow, not a flood
		}
	}()
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if _, err := indexEntryErr(js, "run.flow-20"); err != nil {
			return err
		}
		return nil
	})
	if err := js.DeleteConsumer(ctxFor(t, 5*time.Second), events.EventStream, "proj-index"); err != nil {
		t.Fatal(err)
	}
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		out, code := status()
		if code == 0 || !strings.Contains(out, "proj-index") || !strings.Contains(out, "DEGRADED") {
			return fmt.Errorf("heed status: exit %d\n%s", code, out)
		}
		return nil
	})
	checkFor(t, 30*time.Second, 250*time.Millisecond, func() error {
		out, code := status()
		if code != 0 {
			return fmt.Errorf("heed status: exit %d\n%s", code, out)
		}
		return nil
	})
	stopFlow()
	n := <-done
	done <- n // for the cleanup
	waitIndexed(t, js, fmt.Sprintf("flow-%d", n), 1, fmt.Sprintf("flow-%d-e", n))
	out, errOut, code := runCLI(t, "--nats-url", h.url, "replay")
	if code != 0 {
		t.Fatalf("heed replay after the durable was recreated: exit %d\n%s\n%s", code, out, errOut)
	}
}

func indexEntryErr(js jetstream.JetStream, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "heed_index")
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}
