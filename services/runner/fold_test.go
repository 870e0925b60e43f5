package runner

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
)

// TestFoldAgrees records 1,000 runs of random skills in a random world
// (tools that fail and succeed, a healer that is silent, gives up,
// retries or hands the failure to the agent, agents that retry or let
// on_error apply, people who proceed or cancel) and checks that the two
// ways heed derives a run's state agree on every one: the runner's, which
// applies its own events before they are stored and reads answers from
// the confirmations' subjects, and the healer's (and the CLI's), which
// folds the run's subject in log order.
func TestFoldAgrees(t *testing.T) {
	const runs = 1000
	statuses := map[string]int{}
	for n := range runs {
		rng := rand.New(rand.NewPCG(uint64(n), 42))
		sc := randomScenario(rng)
		s := newSim(t, sc)
		s.run()
		statuses[s.state.Status]++
		var subject []*events.Event
		for _, ev := range s.log {
			if ev.Subject() == goldenRun {
				subject = append(subject, ev)
			}
		}
		healer := runstate.New(goldenRun)
		skills := skill.NewCache()
		for i, ev := range subject {
			if err := healer.Apply(ev, uint64(i+1), skills); err != nil {
				t.Fatal(err)
			}
		}
		a, _ := s.state.Snapshot()
		b, _ := healer.Snapshot()
		if !bytes.Equal(a, b) {
			t.Fatalf("run %d: the runner's state and the healer's fold differ\nskill:\n%s\nrunner: %s\nhealer: %s", n, sc.Skill, a, b)
		}
	}
	// The world must have reached every ending, or the test proves little.
	for _, st := range []string{runstate.StatusCompleted, runstate.StatusFailed, runstate.StatusCancelled} {
		if statuses[st] < runs/20 {
			t.Errorf("only %d of %d runs ended %s: %v", statuses[st], runs, st, statuses)
		}
	}
	t.Logf("endings: %v", statuses)
}

// randomScenario is a random skill of tool, compute and confirm steps and
// a random world around it.
func randomScenario(rng *rand.Rand) *scenario {
	sc := &scenario{Results: map[string][]toolResult{}, Agent: "", Expect: ""}
	if rng.IntN(2) == 0 {
		sc.Agent = "agent:random"
	}
	var b strings.Builder
	b.WriteString("name: random\nsteps:\n")
	steps := 2 + rng.IntN(4)
	for k := range steps {
		switch rng.IntN(4) {
		case 0:
			b.WriteString(fmt.Sprintf("  - name: c%d\n    compute: '\"v%d\"'\n    output: o%d\n", k, k, k))
		case 1:
			b.WriteString(fmt.Sprintf("  - name: q%d\n    confirm:\n      message: go on?\n      options: [{label: Go, value: proceed}, {label: Stop, value: cancel}]\n      default: cancel\n", k))
			choice := "proceed"
			if rng.IntN(6) == 0 {
				choice = "cancel"
			}
			cid := ConfirmID(goldenRun, k, 1)
			sc.Reactions = append(sc.Reactions, reaction{On: cid + "/requested", After: "5s", Publish: []outsideEvent{{
				Type: string(events.ConfirmAnswered), ID: cid + "/answer", Subject: cid, Source: "golden/person",
				Data: map[string]any{"choice": choice, "method": "human", "by": "user:random", "run_id": goldenRun}}}})
		default:
			tool := fmt.Sprintf("t%d", k)
			onError := []string{"fail", "continue", "retry"}[rng.IntN(3)]
			b.WriteString(fmt.Sprintf("  - name: s%d\n    tool: %s\n    args: {x: %d}\n    on_error: %s\n", k, tool, k, onError))
			if onError == "retry" {
				b.WriteString("    retry: {attempts: 2, backoff: 1s}\n")
			}
			for range 6 {
				if rng.IntN(2) == 0 {
					sc.Results[tool] = append(sc.Results[tool], toolResult{Output: map[string]any{"ok": true}})
				} else {
					sc.Results[tool] = append(sc.Results[tool], toolResult{Error: map[string]any{"message": "boom", "kind": "exit", "exit_code": 1}})
				}
			}
			for a := 1; a <= 4; a++ {
				sc.Reactions = append(sc.Reactions, healerReaction(rng, sc.Agent != "", k, a)...)
			}
		}
	}
	sc.Skill = b.String()
	return sc
}

// healerReaction is what a random healer (and agent) does about attempt
// a of step k when it fails.
func healerReaction(rng *rand.Rand, hasAgent bool, k, a int) []reaction {
	prefix := fmt.Sprintf("%s/s%d/a%d/", goldenRun, k, a)
	ref := map[string]any{"step": fmt.Sprintf("s%d", k), "index": k, "attempt": a}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for key, v := range ref {
			m[key] = v
		}
		for key, v := range extra {
			m[key] = v
		}
		return m
	}
	heal := func(verb string, data map[string]any) outsideEvent {
		return outsideEvent{Type: "heed.run.heal." + verb, ID: prefix + "heal/" + verb, Source: "heed/healer", Data: data}
	}
	triggered := heal("triggered", with(map[string]any{"tool": fmt.Sprintf("t%d", k), "error": map[string]any{"message": "boom"},
		"classification": map[string]any{"kind": "unknown", "signature": "boom"}, "plan": "agent", "heal_attempt": 1}))
	switch rng.IntN(5) {
	case 0: // silent: the runner's own wait decides
		return nil
	case 1:
		return []reaction{{On: prefix + "failed", After: "20ms", Publish: []outsideEvent{heal("gave_up", with(map[string]any{"reason": "no fix"}))}}}
	case 2:
		return []reaction{{On: prefix + "failed", After: "20ms", Publish: []outsideEvent{triggered,
			heal("retried", with(map[string]any{"next_attempt": a + 1, "args": map[string]any{"x": k}}))}}}
	default:
		if !hasAgent {
			return []reaction{{On: prefix + "failed", After: "20ms", Publish: []outsideEvent{heal("gave_up", with(map[string]any{"reason": "no agent"}))}}}
		}
		escalate := reaction{On: prefix + "failed", After: "20ms", Publish: []outsideEvent{triggered,
			heal("escalated", with(map[string]any{"agent": "agent:random", "question": "what now?"}))}}
		// The agent answers: a corrected retry (what heed.cmd.run.retry
		// writes) or on_error applies (heed.cmd.run.continue).
		var answer []outsideEvent
		if rng.IntN(2) == 0 {
			answer = []outsideEvent{
				{Type: string(events.RunResumed), ID: fmt.Sprintf("%s/s%d/a%d/resumed", goldenRun, k, a+1), Source: Source,
					Data: map[string]any{"step": fmt.Sprintf("s%d", k), "index": k, "method": "agent", "by": "agent:random"}},
				{Type: string(events.RunStepStarted), ID: fmt.Sprintf("%s/s%d/a%d/started", goldenRun, k, a+1), Source: Source,
					Data: map[string]any{"step": fmt.Sprintf("s%d", k), "index": k, "attempt": a + 1, "kind": "tool", "tool": fmt.Sprintf("t%d", k),
						"args": map[string]any{"x": k + 100}, "retry_of": prefix + "failed"}},
			}
		} else {
			answer = []outsideEvent{{Type: string(events.RunResumed), ID: prefix + "continue", Source: Source,
				Data: map[string]any{"step": fmt.Sprintf("s%d", k), "index": k, "choice": runstate.ChoiceOnError, "method": "agent", "by": "agent:random"}}}
		}
		return []reaction{escalate, {On: prefix + "paused-agent", After: "3s", Publish: answer}}
	}
}
