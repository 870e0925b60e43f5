package escalator_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/service/servicetest"
	"github.com/heedhq/heed/services/confirm"
)

type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr strings.Builder
	done   chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("--- heed-escalator (pid %d) stderr ---\n%s", p.cmd.Process.Pid, p.stderr.String())
			p.mu.Unlock()
		}
	})
	return p
}

// kill ends the process at once, like a crash: no drain, nothing flushed.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// The seed's acceptance: a tier's timeout escalates to the next tier
// exactly once across a kill -9 of the escalator and a restart. The
// escalator runs as a process of its own; it is killed as the deadline
// fires (at a random moment around it), and a new one takes over.
func TestTierTimeoutExactlyOnceAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills processes")
	}
	bin := filepath.Join(t.TempDir(), "heed-escalator")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/heed-escalator").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(t.TempDir(), "escalation.yaml")
	if err := os.WriteFile(cfg, []byte("tiers:\n  - {name: tier1, timeout: 1s}\n  - {name: tier2, timeout: 60s}\n  - {name: top, timeout: 60s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := eventstest.Start(t)
	servicetest.Start(t, env, "confirm-router", func(ctx context.Context, rt *service.Runtime) error {
		return confirm.Run(ctx, rt, confirm.Config{})
	})
	s := &stack{env: env, bus: env.Bus(t), nc: env.Conn(t)}
	args := []string{"--nats-url", env.URL(), "--config", cfg, "--log-level", "debug"}
	healthy := func(p *proc) {
		eventstest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			select {
			case <-p.done:
				t.Fatalf("heed-escalator exited: %v", p.cmd.ProcessState)
			default:
			}
			if _, err := s.nc.Request(service.HealthSubject("escalator"), nil, time.Second); err != nil {
				return err
			}
			return command.Call(context.Background(), s.nc, command.EscalationHeld, command.HeldRequest{}, &command.HeldReply{})
		})
	}
	p := startProc(t, bin, args...)
	healthy(p)
	for round := range 3 {
		id := fmt.Sprintf("e-kill-%d", round)
		s.request(t, command.RequestEscalation{ID: id, EscalationRequestedData: events.EscalationRequestedData{Session: "agent/k", Operation: "deploy", Risk: ptr(0.6), Confidence: ptr(0.8)}})
		// Kill as the deadline fires: when its expiry is in the log, after
		// a random pause of up to 20 ms (before, while or after the
		// escalator acts on it).
		eventstest.CheckFor(t, 20*time.Second, 2*time.Millisecond, func() error {
			if count(s.history(t, events.SubjectFilter("confirm", id+"-o1")), events.ConfirmExpired) == 0 {
				return fmt.Errorf("deadline of %s-o1 not fired", id)
			}
			return nil
		})
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // the random kill point, not a wait for a condition
		p.kill()
		p = startProc(t, bin, args...)
		healthy(p)
		filter := events.SubjectFilter("escalation", id)
		eventstest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			if evs := s.history(t, filter); count(evs, events.EscalationOffered) < 2 {
				return fmt.Errorf("events: %s", types(evs))
			}
			if count(s.history(t, events.SubjectFilter("confirm", id+"-o2")), events.ConfirmRequested) == 0 {
				return fmt.Errorf("no confirmation %s-o2", id)
			}
			return nil
		})
		// Anything written twice would be in the log by the time the
		// restarted escalator has caught up with its consumer.
		eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			var st command.EscalationState
			return command.Call(context.Background(), s.nc, command.EscalationStatus, command.EscalationStatusRequest{ID: id}, &st)
		})
		evs := s.history(t, filter)
		if got := types(evs); got != "requested routed offered escalated offered" {
			t.Fatalf("round %d: events %s", round, got)
		}
		if esc := last[events.EscalationEscalatedData](t, evs, events.EscalationEscalated); esc.Reason != events.EscalateTimeout || esc.ToTier != "tier2" || esc.EscalationCount != 1 {
			t.Errorf("round %d: escalated %+v", round, esc)
		}
		if n := count(s.history(t, events.SubjectFilter("confirm", id+"-o2")), events.ConfirmRequested); n != 1 {
			t.Errorf("round %d: %d requests of tier2's confirmation", round, n)
		}
	}
	// Nothing more came meanwhile (a delivery the killed process held is
	// redelivered only after the ack wait; deciding it again writes nothing).
	for round := range 3 {
		id := fmt.Sprintf("e-kill-%d", round)
		if got := types(s.history(t, events.SubjectFilter("escalation", id))); got != "requested routed offered escalated offered" {
			t.Errorf("round %d at the end: %s", round, got)
		}
	}
}
