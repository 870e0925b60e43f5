package conformance

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

const oneConfirmSkill = `name: conformance_one_confirm
description: one confirmation
steps:
  - name: approve
    confirm:
      message: "Go ahead?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: 300
    output: decision
summary: "chose {{ decision }}"
`

// TestImmediateContinue starts 1,000 runs that each pause at a
// confirmation and continues each one the instant its paused event arrives
// on a core NATS subscription, possibly before JetStream has stored it: a
// command about a run judges the run as its caller saw it (EVENTS.md,
// Commands), so no continue may be refused and every run completes.
func TestImmediateContinue(t *testing.T) {
	if testing.Short() {
		t.Skip("long tier (1,000 runs, ~20 s): skipped by -short (make test-fast); make test and make unit run it")
	}
	const (
		runs     = 1000
		inFlight = 50
	)
	h := startHeed(t)
	nc := h.nc

	var (
		mu        sync.Mutex
		started   = map[string]bool{}
		paused    = map[string]bool{}
		completed = map[string]bool{}
		ended     = map[string]string{} // run → an ending other than completed
		refused   []string
		continues sync.WaitGroup
	)
	// Subscriptions before the first run starts. Core NATS delivers the
	// events as the stream receives them.
	sub, err := nc.Subscribe("heed.run.*.paused", func(m *nats.Msg) {
		runID := strings.Split(m.Subject, ".")[2]
		mu.Lock()
		dup := paused[runID]
		paused[runID] = true
		mu.Unlock()
		if dup {
			return
		}
		continues.Add(1)
		go func() {
			defer continues.Done()
			var rep runReply
			err := request(nc, "heed.cmd.run.continue", map[string]any{"run_id": runID, "choice": "proceed", "by": agentName}, &rep)
			if err == nil && (rep.RunID != runID || rep.ConfirmID == "") {
				err = fmt.Errorf("reply %+v names another run or no confirmation", rep)
			}
			if err != nil {
				mu.Lock()
				refused = append(refused, fmt.Sprintf("%s: %v", runID, err))
				mu.Unlock()
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := nc.Subscribe("heed.run.*.*", func(m *nats.Msg) {
		parts := strings.Split(m.Subject, ".")
		runID, verb := parts[2], parts[3]
		switch verb {
		case "completed":
			mu.Lock()
			completed[runID] = true
			mu.Unlock()
		case "failed", "cancelled":
			mu.Lock()
			ended[runID] = verb + " " + string(m.Data)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*nats.Subscription{sub, ends} {
		if err := s.SetPendingLimits(-1, -1); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(); _ = ends.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	sem := make(chan struct{}, inFlight)
	var starts sync.WaitGroup
	var startErrs []error
	for range runs {
		sem <- struct{}{}
		starts.Add(1)
		go func() {
			defer starts.Done()
			defer func() { <-sem }()
			req := map[string]any{"skill": map[string]any{"source": oneConfirmSkill}, "requested_by": eventSource}
			var rep runReply
			err := request(nc, "heed.cmd.run.start", req, &rep)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				startErrs = append(startErrs, err)
				return
			}
			started[rep.RunID] = true
		}()
	}
	starts.Wait()
	startedIn := time.Since(begin)
	if len(startErrs) > 0 {
		t.Fatalf("%d of %d starts failed, e.g. %v", len(startErrs), runs, startErrs[0])
	}

	// Every run completes, as the core subscription sees it.
	deadline := time.Now().Add(90 * time.Second)
	for {
		mu.Lock()
		nDone, nEnded, nPaused := len(completed), len(ended), len(paused)
		mu.Unlock()
		if nDone+nEnded >= runs {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after %v: %d runs started, %d paused, %d completed, %d ended otherwise", time.Since(begin), len(started), nPaused, nDone, nEnded)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(begin)
	continues.Wait()

	// Every goroutine has finished: the maps are no longer written.
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d runs started in %v; all paused, continued and completed in %v (%.0f runs/s)", runs, startedIn.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(runs)/elapsed.Seconds())
	if len(refused) > 0 {
		sort.Strings(refused)
		t.Errorf("%d of %d continue requests were refused, want 0; e.g.:\n  %s", len(refused), len(paused), strings.Join(refused[:min(5, len(refused))], "\n  "))
	}
	if len(ended) > 0 {
		var some []string
		for id, how := range ended {
			some = append(some, id+": "+how)
		}
		sort.Strings(some)
		t.Errorf("%d runs ended without completing; e.g.:\n  %s", len(ended), strings.Join(some[:min(5, len(some))], "\n  "))
	}
	var missing []string
	for id := range started {
		if !paused[id] {
			missing = append(missing, id+" (never paused)")
		} else if !completed[id] && ended[id] == "" {
			missing = append(missing, id+" (paused, not completed)")
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("%d of %d runs did not complete; e.g. %v", len(missing), runs, missing[:min(5, len(missing))])
	}
	if len(completed) != runs {
		t.Errorf("%d runs completed, want %d", len(completed), runs)
	}

	// The read model agrees: every run's index entry says completed.
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		kv, err := h.js.KeyValue(ctx, indexBucket)
		if err != nil {
			return err
		}
		var notDone []string
		for id := range started {
			e, err := kvIndex(ctx, kv, "run."+id)
			if err != nil {
				notDone = append(notDone, err.Error())
			} else if e.Status != "completed" {
				notDone = append(notDone, id+": "+e.Status)
			}
		}
		if len(notDone) > 0 {
			sort.Strings(notDone)
			return fmt.Errorf("%d runs not completed in %s, e.g. %v", len(notDone), indexBucket, notDone[:min(3, len(notDone))])
		}
		return nil
	})
}
