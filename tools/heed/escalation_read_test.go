package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
)

// TestEscalationReadSide: through a real heed up (the escalator with its
// default config): four identical requests approved by a person and
// reported successful make the fifth a cached approval; its failure sends
// the sixth to people again; heed stats counts the escalations avoided,
// heed status shows an escalation's index entry, heed audit its whole
// story with its offer's confirmation, and heed replay rebuilds the
// learner's buckets identically.
func TestEscalationReadSide(t *testing.T) {
	t.Parallel()
	url, _ := startHeedCLI(t)
	ctx := ctxFor(t, 120*time.Second)
	c, err := heedclient.Connect(ctx, url, heedclient.Name("escalation-read-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, append([]string{"--nats-url", url}, args...)...)
	}
	risk := 0.5 // tier1 (medium_risk), priority 8
	request := func(id string, approvers ...string) command.EscalationReply {
		t.Helper()
		r, err := c.RequestEscalation(ctx, command.RequestEscalation{ID: id, EscalationRequestedData: events.EscalationRequestedData{
			Session: "sess-read", Operation: "git_push", Scope: "origin/main", Risk: &risk, Requester: "agent/test", Approvers: approvers}})
		if err != nil {
			t.Fatalf("request %s: %v", id, err)
		}
		return r
	}
	decided := func(id, want string) {
		t.Helper()
		checkFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			st, err := c.EscalationStatus(ctx, id)
			if err != nil {
				return err
			}
			if st.Decided == nil || st.Decided.Decision != want {
				return fmt.Errorf("%s not %s yet: %s", id, want, st.Status)
			}
			return nil
		})
	}
	outcome := func(id, o string) {
		t.Helper()
		if _, err := c.ReportOutcome(ctx, command.ReportOutcome{ID: id, Outcome: o, By: "agent/test"}); err != nil {
			t.Fatalf("outcome of %s: %v", id, err)
		}
	}
	cacheRecord := func(check func(readmodel.Decision) error) {
		t.Helper()
		checkFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			ds, err := c.Decisions(ctx)
			if err != nil {
				return err
			}
			for _, d := range ds {
				if d.Operation == "git_push" && d.Scope == "origin/main" {
					return check(d)
				}
			}
			return fmt.Errorf("no record of git_push in origin/main: %+v", ds)
		})
	}

	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("esc-read-%d", i)
		r := request(id, "alice", "bob")
		if r.Status != events.EscalationHeld || r.Offer == nil {
			t.Fatalf("%s: %+v, want held by an offer", id, r)
		}
		if i == 1 {
			// Someone outside the tier is refused, and the audit shows it.
			if out, errOut, code := cli("confirm", "answer", r.Offer.ConfirmID, "approve", "--by", "mallory"); code != 2 {
				t.Fatalf("mallory: exit %d, want 2\n%s%s", code, out, errOut)
			}
			// Straight to the log, past the command: every reader refuses it.
			ev, err := events.NewEvent(events.ConfirmAnswered, r.Offer.ConfirmID, r.Offer.ConfirmID+"/answered/mallory", "heed-e2e-test",
				events.ConfirmAnsweredData{Choice: "approve", Method: events.MethodUser, By: "mallory"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Bus().Publish(ctx, &ev); err != nil {
				t.Fatal(err)
			}
		}
		if out, errOut, code := cli("confirm", "answer", r.Offer.ConfirmID, "approve", "--by", "alice"); code != 0 {
			t.Fatalf("answer %s: exit %d\n%s%s", r.Offer.ConfirmID, code, out, errOut)
		}
		decided(id, events.EscalationApproved)
		outcome(id, events.OutcomeSuccess)
		want := i
		cacheRecord(func(d readmodel.Decision) error {
			if d.Successes != want {
				return fmt.Errorf("%d successes, want %d", d.Successes, want)
			}
			return nil
		})
	}
	cacheRecord(func(d readmodel.Decision) error {
		if !d.Candidate || d.Count != 4 || d.ConfidenceBoost != 0.2 {
			return fmt.Errorf("not a candidate with boost 0.2: %+v", d)
		}
		return nil
	})
	// The escalator watches heed_decisions: the fifth is approved by the
	// cache once it has seen the record.
	var r5 command.EscalationReply
	attempt := 0
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		// A new id each time: a held one stays held (same id, same escalation).
		attempt++
		r5 = request(fmt.Sprintf("esc-read-5-%d", attempt))
		if r5.Status != events.EscalationApproved {
			return fmt.Errorf("the 5th: %+v", r5)
		}
		return nil
	})
	if r5.Routed.Decision != events.RouteCachedApprove || r5.Routed.Cache == nil || r5.Routed.Cache.Count != 4 {
		t.Fatalf("the 5th identical request: %+v, want cached_approve", r5.Routed)
	}
	outcome(r5.ID, events.OutcomeFailure)
	cacheRecord(func(d readmodel.Decision) error {
		if d.Candidate || !d.Suspended || d.CacheApproved != 1 || d.Count != 4 {
			return fmt.Errorf("after the failure: %+v, want suspended", d)
		}
		return nil
	})
	lagged := 0 // cached approvals while the escalator's watch lagged behind the failure
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if r := request(fmt.Sprintf("esc-read-6-%d", time.Now().UnixNano())); r.Status != events.EscalationHeld {
			if r.Routed.Decision == events.RouteCachedApprove {
				lagged++
			}
			return fmt.Errorf("after a failure, the next request: %+v, want held", r)
		}
		return nil
	})
	// A conditional rule's approval, avoided too.
	low, sure := 0.1, 0.9
	rr, err := c.RequestEscalation(ctx, command.RequestEscalation{ID: "esc-read-tests", EscalationRequestedData: events.EscalationRequestedData{
		Session: "sess-read", Operation: "test_execution", Risk: &low, Confidence: &sure, Requester: "agent/test"}})
	if err != nil || rr.Status != events.EscalationApproved || rr.Routed.Decision != events.RouteConditionalApprove {
		t.Fatalf("test run: %+v %v", rr, err)
	}

	// heed stats: 6 decided (4 by a person, the cache, a rule), 2 avoided.
	var stats struct {
		Escalations escalationReport `json:"escalations"`
	}
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		out, errOut, code := cli("stats", "--json")
		if code != 0 {
			return fmt.Errorf("stats: exit %d %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &stats); err != nil {
			return err
		}
		if e := stats.Escalations; e.DecidedTotal != 6+lagged || e.Avoided != 2+lagged || e.Failures != 1 || e.Successes != 4 {
			return fmt.Errorf("escalations %+v", e)
		}
		return nil
	})
	e := stats.Escalations
	if e.Decided[events.MethodUser] != 4 || e.Decided[events.EscMethodCache] != 1+lagged || e.Decided[events.EscMethodRule] != 1 ||
		e.Routed[events.RouteCachedApprove] != 1+lagged || e.Routed[events.RouteConditionalApprove] != 1 || e.Routed[events.RouteEscalate] < 5 || e.Requested < 7 {
		t.Errorf("stats: %+v", e)
	}
	out, _, _ := cli("stats")
	want := "escalations avoided: 2 of 6 (33.3%)"
	if lagged > 0 {
		want = fmt.Sprintf("escalations avoided: %d of %d (", 2+lagged, 6+lagged)
	}
	if !strings.Contains(out, "Escalations:") || !strings.Contains(out, want) {
		t.Errorf("heed stats lacks the escalations:\n%s", out)
	}

	// heed status of an escalation: its index entry.
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		out, errOut, code := cli("status", "esc-read-1")
		for _, want := range []string{"escalation esc-read-1: approved", "operation    git_push", "decided      by alice (user)", "outcome      success"} {
			if code != 0 || !strings.Contains(out, want) {
				return fmt.Errorf("status lacks %q: exit %d\n%s%s", want, code, out, errOut)
			}
		}
		return nil
	})

	// heed audit: the whole story in log order, with the offer's
	// confirmation.
	out, errOut, code := cli("audit", "esc-read-1")
	if code != 0 {
		t.Fatalf("audit: exit %d\n%s%s", code, out, errOut)
	}
	wants := []string{
		"escalation esc-read-1 (operation git_push, scope origin/main, session sess-read, outcome success): approved",
		"escalation.requested", "session sess-read  operation git_push  scope origin/main  risk 0.50  by agent/test  approvers alice,bob",
		"escalation.routed", "escalate  risk 0.50 (request)", "rule medium_risk", "priority 8  tier tier1",
		"escalation.offered", "offer 1 to tier tier1  confirmation esc-read-1-o1  members alice,bob  deadline",
		"confirm.requested", "offer 1 of esc-read-1  tier tier1  approvers alice,bob  timeout 5m0s",
		"confirm.answered", "by mallory", "✗ refused: ",
		"by alice",
		"escalation.decided", "approved  method user  by alice  on cli  tier tier1  confirmation esc-read-1-o1",
		"escalation.outcome", "success  by agent/test",
	}
	at := 0
	for _, w := range wants {
		i := strings.Index(out[at:], w)
		if i < 0 {
			t.Fatalf("audit lacks %q after position %d (in order):\n%s", w, at, out)
		}
		at += i
	}
	out, _, code = cli("audit", r5.ID)
	if code != 0 || !strings.Contains(out, "cached_approve") || !strings.Contains(out, "cache 4 decisions, 100% success, boost 0.20") ||
		!strings.Contains(out, "approved  method cache") || !strings.Contains(out, "failure  by agent/test") {
		t.Errorf("audit of the cached approval:\n%s", out)
	}
	out, _, code = cli("audit", "esc-read-1", "--json")
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct{ Type string }
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit --json: %v in %q", err, line)
		}
		types = append(types, strings.TrimPrefix(ev.Type, "heed."))
	}
	if got := strings.Join(types, " "); code != 0 || got != "escalation.requested escalation.routed escalation.offered confirm.requested confirm.answered confirm.refused confirm.answered escalation.decided escalation.outcome" {
		t.Errorf("audit --json types: %s", got)
	}

	// Replay rebuilds the learner's buckets and the index identically.
	out, errOut, code = cli("replay", "--json")
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	for _, b := range []string{readmodel.DecisionsBucket, readmodel.StatsBucket, readmodel.IndexBucket} {
		if !strings.Contains(out, b) {
			t.Errorf("replay did not rebuild %s:\n%s", b, out)
		}
	}
}
