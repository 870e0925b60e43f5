package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A skill with a compute step, a tool step (from skills/tools.yaml) and a
// confirmation handed to the run's agent (ai_assist).
const approveSkill = `name: conformance_approve
description: compute, check an image, ask the agent
inputs:
  who: {type: string, required: true}
  sha: {type: string, required: true}
steps:
  - name: plan
    compute: '{"greeting": "hello " + inputs.who, "letters": len(inputs.who)}'
    output: plan
  - name: check_image
    tool: quay_check
    args:
      tag: "{{ inputs.sha }}"
    output: image
  - name: approve
    confirm:
      title: Greet {{ inputs.who }}
      message: "Say {{ plan.greeting }} ({{ plan.letters }} letters)?"
      options:
        - {label: Proceed, value: proceed}
        - {label: Cancel, value: cancel}
      default: cancel
      timeout: 300
      ai_assist: true
    output: decision
summary: "{{ plan.greeting }}: {{ decision }} ({{ image.image }})"
`

// A skill whose only step checks an image tag: quay_check fails with
// "manifest unknown" unless the tag is a full 40-character SHA.
const checkSkill = `name: conformance_check
description: check that an image exists
inputs:
  tag: {type: string, required: true}
steps:
  - name: check_image
    tool: quay_check
    args:
      tag: "{{ inputs.tag }}"
    output: image
summary: "found {{ image.image }}"
`

const (
	fullSHA  = "0123456789abcdef0123456789abcdef01234567"
	shortSHA = "0123456"
)

type healData struct {
	Step           string `json:"step"`
	Index          int    `json:"index"`
	Attempt        int    `json:"attempt"`
	Plan           string `json:"plan"`
	Via            string `json:"via"`
	FixID          string `json:"fix_id"`
	Agent          string `json:"agent"`
	NextAttempt    int    `json:"next_attempt"`
	Classification struct {
		Kind      string `json:"kind"`
		Signature string `json:"signature"`
	} `json:"classification"`
	Fix *struct {
		FixID     string         `json:"fix_id"`
		Source    string         `json:"source"`
		ArgsPatch map[string]any `json:"args_patch"`
	} `json:"fix"`
	Args map[string]any `json:"args"`
}

type fixLearnedData struct {
	Tool         string         `json:"tool"`
	ErrorPattern string         `json:"error_pattern"`
	ArgsPatch    map[string]any `json:"args_patch"`
	WhenWas      map[string]any `json:"when_was"`
	Source       string         `json:"source"`
	By           string         `json:"by"`
	RunID        string         `json:"run_id"`
}

// TestAgentFlow drives runs as an outside agent does: start a run, follow
// its events, answer its confirmation with heed.cmd.run.continue, fix a
// failed tool step with heed.cmd.run.retry, and see heed learn the fix and
// heal the same failure by itself next time.
func TestAgentFlow(t *testing.T) {
	h := startHeed(t)
	nc, js := h.nc, h.js
	fixes := watch(t, js, "heed.fix.>")

	t.Run("continue", func(t *testing.T) {
		runID := startRun(t, nc, approveSkill, map[string]any{"who": "world", "sha": fullSHA}, agentName)
		run := watch(t, js, "heed.run."+runID+".>")

		// React to the pause the way an agent does: answer with continue.
		p := run.waitSubject(30*time.Second, "heed.run."+runID+".paused")
		var paused pausedData
		p.decode(t, &paused)
		if paused.Reason != "awaiting_confirmation" || paused.Step != "approve" || paused.ConfirmID == "" {
			t.Fatalf("paused = %s; want reason awaiting_confirmation at step approve with a confirm_id", p.Data)
		}
		// ai_assist with an agent: the question is handed to the agent.
		conf := watch(t, js, "heed.confirm."+paused.ConfirmID+".>")
		d := conf.waitSubject(10*time.Second, "heed.confirm."+paused.ConfirmID+".delegated")
		var del struct {
			Agent string `json:"agent"`
			RunID string `json:"run_id"`
		}
		d.decode(t, &del)
		if del.Agent != agentName || del.RunID != runID {
			t.Errorf("delegated = %s; want agent %s, run_id %s", d.Data, agentName, runID)
		}

		var rep runReply
		mustRequest(t, nc, "heed.cmd.run.continue", map[string]any{"run_id": runID, "choice": "proceed", "reason": "looks right", "by": agentName}, &rep)
		if rep.RunID != runID || rep.ConfirmID != paused.ConfirmID {
			t.Errorf("continue replied %+v; want run_id %s, confirm_id %s", rep, runID, paused.ConfirmID)
		}

		c := run.waitFor(30*time.Second, "the run's end", isRunEnd)
		if c.Type != "heed.run.completed" {
			t.Fatalf("run ended with %s, want completed; events:%s", c, run.dump())
		}
		var done completedData
		c.decode(t, &done)
		if want := "hello world: proceed (quay.io/app-sre/backend:" + fullSHA + ")"; done.Summary != want {
			t.Errorf("completed summary = %q, want %q", done.Summary, want)
		}
		r := run.waitSubject(time.Second, "heed.run."+runID+".resumed")
		var res resumedData
		r.decode(t, &res)
		if res.Choice != "proceed" || res.Method != "agent" || res.By != agentName || res.ConfirmID != paused.ConfirmID {
			t.Errorf("resumed = %s; want choice proceed, method agent, by %s, confirm_id %s", r.Data, agentName, paused.ConfirmID)
		}
		waitIndex(t, js, "run."+runID, 10*time.Second, func(e indexEntry) error {
			if e.Status != "completed" {
				return fmt.Errorf("status %q, want completed", e.Status)
			}
			return nil
		})
	})

	var fixID string
	t.Run("corrected retry is learned", func(t *testing.T) {
		runID := startRun(t, nc, checkSkill, map[string]any{"tag": shortSHA}, agentName)
		run := watch(t, js, "heed.run."+runID+".>")

		f := run.waitSubject(30*time.Second, "heed.run."+runID+".step.failed")
		if !strings.Contains(string(f.Data), "manifest unknown") {
			t.Fatalf("step.failed = %s; want quay_check's manifest unknown", f.Data)
		}
		// An unknown error in a run with an agent: the healer hands it over
		// (HEALING.md: "manifest unknown" is a not_found without a fix tool).
		tr := run.waitSubject(10*time.Second, "heed.run."+runID+".heal.triggered")
		var trig healData
		tr.decode(t, &trig)
		if trig.Plan != "agent" {
			t.Fatalf("heal.triggered plan = %q (%s); want agent (no fix known, the run has an agent)", trig.Plan, tr.Data)
		}
		esc := run.waitSubject(10*time.Second, "heed.run."+runID+".heal.escalated")
		var escd healData
		esc.decode(t, &escd)
		if escd.Agent != agentName {
			t.Errorf("heal.escalated agent = %q, want %s", escd.Agent, agentName)
		}

		// The agent reacts to the pause with a corrected retry.
		p := run.waitSubject(10*time.Second, "heed.run."+runID+".paused")
		var paused pausedData
		p.decode(t, &paused)
		if paused.Reason != "awaiting_agent" || paused.Step != "check_image" {
			t.Fatalf("paused = %s; want reason awaiting_agent at check_image", p.Data)
		}
		var rep runReply
		mustRequest(t, nc, "heed.cmd.run.retry", map[string]any{"run_id": runID, "args": map[string]any{"tag": fullSHA}, "reason": "use the full SHA", "by": agentName}, &rep)
		if rep.RunID != runID {
			t.Errorf("retry replied %+v, want run_id %s", rep, runID)
		}

		c := run.waitFor(30*time.Second, "the run's end", isRunEnd)
		if c.Type != "heed.run.completed" {
			t.Fatalf("run ended with %s, want completed; events:%s", c, run.dump())
		}
		st := run.find(isSubject("heed.run." + runID + ".step.started"))
		if len(st) != 2 {
			t.Fatalf("%d step.started events, want 2 (the failed attempt and the retry); events:%s", len(st), run.dump())
		}
		var retry stepStartedData
		st[1].decode(t, &retry)
		if retry.Attempt != 2 || retry.Args["tag"] != fullSHA || retry.RetryOf != f.ID {
			t.Errorf("retry step.started = %s; want attempt 2, args.tag %s, retry_of %s (the failed attempt)", st[1].Data, fullSHA, f.ID)
		}

		hd := run.waitSubject(10*time.Second, "heed.run."+runID+".heal.healed")
		var healed healData
		hd.decode(t, &healed)
		if healed.Via != "agent" || healed.Attempt != 2 {
			t.Errorf("heal.healed = %s; want via agent, attempt 2", hd.Data)
		}
		l := fixes.waitFor(10*time.Second, "heed.fix.<id>.learned from run "+runID, func(e event) bool {
			return e.Type == "heed.fix.learned" && strings.Contains(string(e.Data), runID)
		})
		var learned fixLearnedData
		l.decode(t, &learned)
		if learned.Tool != "quay_check" || learned.ArgsPatch["tag"] != fullSHA || learned.WhenWas["tag"] != shortSHA ||
			learned.Source != "agent" || learned.RunID != runID {
			t.Errorf("fix.learned = %s; want tool quay_check, args_patch.tag %s, when_was.tag %s, source agent, run_id %s", l.Data, fullSHA, shortSHA, runID)
		}
		fixID = strings.TrimSuffix(strings.TrimPrefix(l.Subject, "heed.fix."), ".learned")
		if ce := l.Header.Get("ce-subject"); ce != fixID {
			t.Errorf("fix.learned ce-subject %q, subject %s", ce, l.Subject)
		}
	})
	if fixID == "" {
		t.Fatal("no fix was learned; the learned-fix run cannot be checked")
	}

	t.Run("same failure heals by itself", func(t *testing.T) {
		// The healer reads learned fixes from the learner's projection
		// (heed_fixes): wait until the fix is there, as the next run may
		// otherwise fail before the learner has caught up.
		checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			kv, err := js.KeyValue(ctxFor(t, 5*time.Second), fixesBucket)
			if err != nil {
				return err
			}
			_, err = kv.Get(ctxFor(t, 5*time.Second), fixID)
			return err
		})

		runID := startRun(t, nc, checkSkill, map[string]any{"tag": shortSHA}, agentName)
		run := watch(t, js, "heed.run."+runID+".>")
		c := run.waitFor(30*time.Second, "the run's end", isRunEnd)
		if c.Type != "heed.run.completed" {
			t.Fatalf("run ended with %s, want completed (healed by the learned fix %s); events:%s", c, fixID, run.dump())
		}
		tr := run.waitSubject(time.Second, "heed.run."+runID+".heal.triggered")
		var trig healData
		tr.decode(t, &trig)
		if trig.Plan != "learned_fix" || trig.Fix == nil || trig.Fix.FixID != fixID {
			t.Errorf("heal.triggered = %s; want plan learned_fix with fix %s", tr.Data, fixID)
		}
		hd := run.waitSubject(10*time.Second, "heed.run."+runID+".heal.healed")
		var healed healData
		hd.decode(t, &healed)
		if healed.Via != "learned_fix" || healed.FixID != fixID {
			t.Errorf("heal.healed = %s; want via learned_fix, fix_id %s", hd.Data, fixID)
		}
		// The healer decides on attempt 1 (escalate or retry) before
		// attempt 2 can start, so once the run has completed an escalation
		// would already be in the log.
		for _, bad := range []string{"heal.escalated", "paused", "heal.gave_up"} {
			if evs := run.find(isSubject("heed.run." + runID + "." + bad)); len(evs) > 0 {
				t.Errorf("a run healed by a learned fix has %s events: %v", bad, evs)
			}
		}
		st := run.find(isSubject("heed.run." + runID + ".step.started"))
		if len(st) != 2 {
			t.Fatalf("%d step.started events, want 2; events:%s", len(st), run.dump())
		}
		var retry stepStartedData
		st[1].decode(t, &retry)
		failed := run.find(isSubject("heed.run." + runID + ".step.failed"))
		retried := run.find(isSubject("heed.run." + runID + ".heal.retried"))
		if len(failed) != 1 || len(retried) != 1 {
			t.Fatalf("%d step.failed and %d heal.retried events, want 1 each; events:%s", len(failed), len(retried), run.dump())
		}
		// HEALING.md: retry_of = the failed attempt's step.failed event,
		// caused by heal.retried.
		if retry.Attempt != 2 || retry.Args["tag"] != fullSHA || retry.RetryOf != failed[0].ID {
			t.Errorf("attempt 2 = %s; want attempt 2, args.tag %s, retry_of %s (the failed attempt)", st[1].Data, fullSHA, failed[0].ID)
		}
		if c := st[1].Header.Get("ce-causationid"); c != retried[0].ID {
			t.Errorf("attempt 2's ce-causationid = %q, want the heal.retried event %s", c, retried[0].ID)
		}
	})
}

func isRunEnd(e event) bool {
	switch e.Type {
	case "heed.run.completed", "heed.run.failed", "heed.run.cancelled":
		return true
	}
	return false
}
