package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestQuorumFromOutside: answers published straight to the log with plain
// NATS + JSON are judged by the request's approvers and quorum by every
// reader: a non-approver's is refused (not_allowed) and changes nothing,
// the first approver's is a vote the index shows, the second completes the
// quorum and the run resumes once with it.
func TestQuorumFromOutside(t *testing.T) {
	h := startHeed(t)
	skill := strings.Replace(confirmSkill(300), "      default: cancel\n", "      default: cancel\n      approvers: [alice, bob, carol]\n      quorum: {required: 2}\n", 1)
	runID, cid, run := pauseAtConfirm(t, h, skill)
	conf := watch(t, h.js, "heed.confirm."+cid+".>")

	badID := cid + "/answer/mallory"
	if _, err := publishEvent(h.js, "heed.confirm.answered", cid, badID, answeredData{Choice: "proceed", Method: "user", By: "mallory", Channel: "conformance"}); err != nil {
		t.Fatal(err)
	}
	e := conf.waitFor(10*time.Second, "heed.confirm."+cid+".refused for "+badID, func(e event) bool {
		return e.Subject == "heed.confirm."+cid+".refused" && strings.Contains(string(e.Data), badID)
	})
	var ref refusedData
	e.decode(t, &ref)
	if ref.Code != "not_allowed" || !strings.Contains(ref.Reason, "mallory may not answer") {
		t.Errorf("refused = %s; want code not_allowed naming mallory", e.Data)
	}
	if _, err := publishEvent(h.js, "heed.confirm.answered", cid, cid+"/answer/alice", answeredData{Choice: "proceed", Method: "user", By: "alice", Channel: "conformance"}); err != nil {
		t.Fatal(err)
	}
	waitIndex(t, h.js, "confirm."+cid, 10*time.Second, func(e indexEntry) error {
		if e.Status != "pending" || e.Refused != 1 || len(e.Votes) != 1 || e.Votes[0].By != "alice" {
			return fmt.Errorf("want pending, 1 refused, alice's vote")
		}
		return nil
	})
	if x, err := readIndex(ctxFor(t, 5*time.Second), h.js, "run."+runID); err != nil || x.Status != "paused" {
		t.Errorf("after one vote the run's index entry is %+v (%v); want paused", x, err)
	}
	bobID := cid + "/answer/bob"
	if _, err := publishEvent(h.js, "heed.confirm.answered", cid, bobID, answeredData{Choice: "proceed", Method: "user", By: "bob", Channel: "conformance"}); err != nil {
		t.Fatal(err)
	}
	end := run.waitFor(30*time.Second, "the run's end", isRunEnd)
	if end.Type != "heed.run.completed" {
		t.Fatalf("run ended with %s, want completed; events:%s", end, run.dump())
	}
	resumed := run.find(isSubject("heed.run." + runID + ".resumed"))
	if len(resumed) != 1 {
		t.Fatalf("%d resumed events, want 1; events:%s", len(resumed), run.dump())
	}
	var res resumedData
	resumed[0].decode(t, &res)
	if res.By != "bob" || res.Choice != "proceed" {
		t.Errorf("resumed = %s; want proceed by bob (the vote that completed the quorum)", resumed[0].Data)
	}
	waitIndex(t, h.js, "confirm."+cid, 10*time.Second, func(e indexEntry) error {
		if e.Status != "answered" || e.AnswerID != bobID || len(e.Votes) != 2 {
			return fmt.Errorf("want answered by bob's %s with 2 votes", bobID)
		}
		return nil
	})
}
