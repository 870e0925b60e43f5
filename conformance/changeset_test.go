package conformance

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestChangeSetFromOutside: an agent in any language proposes a wake's
// deferred calls with a plain request, a person decides with another, a
// decision published straight to the log as a CloudEvent is applied (or,
// when it comes second, refused visibly with the decision that won), and
// the runner applies the confirmed items; bad input gets a clear error.
func TestChangeSetFromOutside(t *testing.T) {
	h := startHeed(t)
	w := watch(t, h.js, "heed.changeset.>")
	var p struct {
		Sets []struct {
			ID    string `json:"id"`
			Items []struct {
				ID      string `json:"id"`
				Item    int    `json:"item"`
				Tool    string `json:"tool"`
				Summary string `json:"summary"`
			} `json:"items"`
		} `json:"sets"`
		Queued  int    `json:"queued"`
		Message string `json:"message"`
	}
	mustRequest(t, h.nc, "heed.cmd.changeset.propose", map[string]any{
		"id": "conf-cs-1", "agent": "agent:outside", "subject": "task-conf",
		"calls": []map[string]any{
			{"tool": "set_task_title", "args": map[string]any{"task": "task-conf", "title": "From outside"}, "before": map[string]any{"title": ""}},
			{"tool": "add_multiple_checklist_items", "args": map[string]any{"task": "task-conf", "items": []map[string]any{{"title": "one"}, {"title": "two"}}}},
		},
	}, &p)
	if len(p.Sets) != 1 || p.Sets[0].ID != "conf-cs-1" || p.Queued != 3 || p.Sets[0].Items[2].ID != "conf-cs-1/3" || p.Sets[0].Items[2].Summary != `Add checklist item: "two"` {
		t.Fatalf("propose reply %+v", p)
	}
	w.waitSubject(10*time.Second, "heed.changeset.conf-cs-1.proposed")

	var d struct {
		Decided []struct {
			Item    int    `json:"item"`
			Verdict string `json:"verdict"`
		} `json:"decided"`
		Status string `json:"status"`
	}
	mustRequest(t, h.nc, "heed.cmd.changeset.decide", map[string]any{"id": "conf-cs-1", "items": []int{1}, "verdict": "confirmed", "by": "user:alice", "channel": "script"}, &d)
	if len(d.Decided) != 1 || d.Status != "partially_resolved" {
		t.Fatalf("decide reply %+v", d)
	}
	// Straight to the log: item 1 again (too late) and item 2 (first).
	if _, err := publishEvent(h.js, "heed.changeset.decided", "conf-cs-1", "conf-cs-1-outside-1", map[string]any{
		"decisions": []map[string]any{{"item": 1, "verdict": "rejected", "reason": "late"}, {"item": 2, "verdict": "confirmed"}}, "by": "user:bob", "channel": "custom-ui"}); err != nil {
		t.Fatal(err)
	}
	refused := w.waitSubject(10*time.Second, "heed.changeset.conf-cs-1.refused")
	var r struct {
		DecisionID string `json:"decision_id"`
		Refused    []struct {
			Item   int    `json:"item"`
			Code   string `json:"code"`
			Reason string `json:"reason"`
			Winner struct {
				By      string `json:"by"`
				Verdict string `json:"verdict"`
			} `json:"winner"`
		} `json:"refused"`
	}
	refused.decode(t, &r)
	if r.DecisionID != "conf-cs-1-outside-1" || len(r.Refused) != 1 || r.Refused[0].Item != 1 || r.Refused[0].Code != "already_decided" || r.Refused[0].Winner.By != "user:alice" {
		t.Fatalf("refused %+v", r)
	}
	// Items 1 and 2 are applied, 3 waits.
	for _, item := range []int{1, 2} {
		w.waitFor(20*time.Second, "item applied", func(e event) bool {
			if e.Subject != "heed.changeset.conf-cs-1.apply.completed" {
				return false
			}
			var c struct {
				Item int `json:"item"`
			}
			e.decode(t, &c)
			return c.Item == item
		})
	}
	var st struct {
		Status string `json:"status"`
		Items  []struct {
			Status string `json:"status"`
			Apply  string `json:"apply"`
			By     string `json:"by"`
		} `json:"items"`
	}
	mustRequest(t, h.nc, "heed.cmd.changeset.status", map[string]any{"id": "conf-cs-1"}, &st)
	if st.Status != "partially_resolved" || st.Items[1].By != "user:bob" || st.Items[1].Apply != "applied" || st.Items[2].Status != "pending" {
		t.Errorf("status %+v", st)
	}

	// Listing and the agent's history, as its next wake reads them.
	var list struct {
		Sets []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"sets"`
	}
	mustRequest(t, h.nc, "heed.cmd.changeset.list", map[string]any{"agent": "agent:outside"}, &list)
	if len(list.Sets) != 1 || list.Sets[0].ID != "conf-cs-1" || list.Sets[0].Status != "partially_resolved" {
		t.Errorf("list %+v", list)
	}
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		var hist struct {
			Text      string `json:"text"`
			Decisions []struct {
				Item    int    `json:"item"`
				Verdict string `json:"verdict"`
				By      string `json:"by"`
			} `json:"decisions"`
		}
		mustRequest(t, h.nc, "heed.cmd.changeset.history", map[string]any{"agent": "agent:outside", "subject": "task-conf"}, &hist)
		if len(hist.Decisions) != 2 || !strings.Contains(hist.Text, `✓ set_task_title(task="task-conf", title="From outside") — confirmed`) {
			return fmt.Errorf("history %+v", hist)
		}
		return nil
	})

	// Bad input: a clear error, nothing written.
	for _, c := range []struct {
		subject string
		body    map[string]any
		code    string
	}{
		{"heed.cmd.changeset.propose", map[string]any{"agent": "a", "subject": "s", "calls": []map[string]any{{"tool": "read_task", "args": map[string]any{"task": "x"}}}}, "invalid_request"},
		{"heed.cmd.changeset.propose", map[string]any{"agent": "a", "subject": "s", "calls": []map[string]any{}}, "invalid_request"},
		{"heed.cmd.changeset.decide", map[string]any{"id": "conf-cs-none", "items": []int{1}, "verdict": "confirmed", "by": "x"}, "not_found"},
		{"heed.cmd.changeset.decide", map[string]any{"id": "conf-cs-1", "items": []int{3}, "verdict": "maybe", "by": "x"}, "invalid_request"},
		{"heed.cmd.changeset.decide", map[string]any{"id": "conf-cs-1", "items": []int{9}, "verdict": "confirmed", "by": "x"}, "invalid_request"},
		{"heed.cmd.changeset.status", map[string]any{"id": "conf-cs-none"}, "not_found"},
		{"heed.cmd.changeset.history", map[string]any{"subject": "task-conf"}, "invalid_request"},
	} {
		err := request(h.nc, c.subject, c.body, nil)
		var ce *cmdError
		if !errors.As(err, &ce) || ce.Code != c.code || ce.HeaderCode != c.code || ce.Message == "" {
			t.Errorf("%s %v: %v, want %s", c.subject, c.body, err, c.code)
		}
	}
	// Nothing of the refused requests was written.
	if n := len(streamMsgs(t, h.js, "heed.changeset.conf-cs-1.decided")); n != 2 {
		t.Errorf("%d decided events, want the two that were sent", n)
	}
	if n := len(streamMsgs(t, h.js, "heed.changeset.*.proposed")); n != 1 {
		t.Errorf("%d proposals, want 1", n)
	}
}
