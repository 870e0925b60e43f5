package changesets_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/services/changesets"
)

// An agent whose items carry documents: its history stays under a bucket
// value's limit (the args kept as a preview), so its decisions keep being
// counted and fed back. Before, the history passed 1 MiB after eight such
// decisions and every write of the agent's history and counts failed from
// then on.
func TestHistoryOfLargeItemsStaysWritable(t *testing.T) {
	r := newRig(t)
	r.start("changesets")
	doc := strings.Repeat("x", 120<<10)
	const n = 12
	for i := range n {
		id := r.propose(command.ProposeChangeSet{Calls: []command.ProposedCall{{Tool: "set_task_title", Args: map[string]any{"title": fmt.Sprint(i), "body": doc}}}}).Sets[0].ID
		must[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{1}, Verdict: events.VerdictConfirmed, By: "user:alice"})
	}
	kv, err := r.bus.JetStream().KeyValue(context.Background(), readmodel.ChangeSetsBucket)
	if err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		var st readmodel.ChangeStats
		e, err := kv.Get(context.Background(), readmodel.ChangeStatsKey("agent:laura"))
		if err != nil || !readmodel.Decode(e.Value(), &st) {
			return fmt.Errorf("no stats yet (%v)", err)
		}
		if c := st.Tools["set_task_title"].Confirmed; c != n {
			return fmt.Errorf("%d of %d decisions counted", c, n)
		}
		return nil
	})
	e, err := kv.Get(context.Background(), readmodel.AgentDecisionsKey("agent:laura"))
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Value()) > 64<<10 {
		t.Errorf("the history is %d bytes", len(e.Value()))
	}
	h := must[command.DecisionHistoryReply](r, command.ChangeSetHistory, command.DecisionHistoryRequest{Agent: "agent:laura", Limit: 100, BudgetTokens: 10000})
	if len(h.Decisions)+h.Omitted != n {
		t.Fatalf("history: %d decisions and %d omitted, want %d", len(h.Decisions), h.Omitted, n)
	}
	for _, d := range h.Decisions {
		body, _ := d.Args["body"].(string)
		if !d.ArgsTruncated || d.Args["title"] == nil || !strings.HasPrefix(body, "xxx") || len(body) > 200+8 {
			t.Fatalf("a decision of a large item: truncated %v, args %.120v", d.ArgsTruncated, d.Args)
		}
	}
	// What the agent reads: the title it proposed, the document's start.
	if !strings.Contains(h.Text, `set_task_title(body="xxx`) || !strings.Contains(h.Text, `title="11"`) {
		t.Errorf("history text: %.400q", h.Text)
	}
}

// A set whose items carry large args, decided with long reasons: its
// value in heed_changesets stays under a bucket value's limit, so the set
// is listed, its decisions show and it resolves in the read model as in
// the log.
func TestLargeSetStaysWritable(t *testing.T) {
	r := newRig(t)
	r.start("changesets")
	doc := strings.Repeat("y", 70<<10)
	reason := strings.Repeat("because ", 500)[:3999] // 4,000 at most; no space at the end
	id := rejectLargeSet(r, doc, reason)
	resolvedInBucket(t, r, id)
	// The status reply holds it whole: 10 items of 70 KiB (each once) and
	// ten reasons of 4,000 bytes are under the limit.
	st := must[command.ChangeSetState](r, command.ChangeSetStatus, command.ChangeSetStatusRequest{ID: id})
	if st.Status != events.SetResolved || st.Items[9].Args["body"] != doc || st.Items[9].ArgsTruncated || st.Items[9].Reason != reason {
		t.Errorf("status: %s, item 10 args cut %v, reason %d bytes", st.Status, st.Items[9].ArgsTruncated, len(st.Items[9].Reason))
	}
	// A list shows sets, their args cut.
	list := must[command.ListChangeSetsReply](r, command.ChangeSetList, command.ListChangeSets{All: true})
	if len(list.Sets) != 1 || list.More != 0 || list.Sets[0].Items[0].Reason == "" || !list.Sets[0].Items[0].ArgsTruncated || list.Sets[0].Items[0].Args["title"] != "0" {
		t.Errorf("list: %d sets (%d more), item 1 %+v", len(list.Sets), list.More, list.Sets[0].Items[0].Args["title"])
	}
}

// A set at the event limit whose decisions carry long reasons passes 900
// KiB in all: the bucket and the status reply hold it fitted (long args
// values cut, args_truncated), the history says the args were cut, and
// the set still resolves in the read model.
func TestSetOverTheLimitIsFitted(t *testing.T) {
	r := newRig(t)
	r.start("changesets")
	doc := strings.Repeat("w", 88<<10) // a proposal just under the 900 KiB event limit
	reason := strings.Repeat("x", 4000)
	id := rejectLargeSet(r, doc, reason)
	st, size := resolvedInBucket(t, r, id)
	if size > 1<<20 || !st.Items[0].ArgsTruncated || st.Items[0].Args["title"] != "0" || st.Items[0].Reason != reason {
		t.Fatalf("the bucket's set: %d bytes, item 1 cut %v, title %v, reason %d bytes", size, st.Items[0].ArgsTruncated, st.Items[0].Args["title"], len(st.Items[0].Reason))
	}
	status := must[command.ChangeSetState](r, command.ChangeSetStatus, command.ChangeSetStatusRequest{ID: id})
	if !status.Items[9].ArgsTruncated || status.Items[9].Args["title"] != "9" {
		t.Errorf("status: item 10 cut %v, title %v", status.Items[9].ArgsTruncated, status.Items[9].Args["title"])
	}
	h := must[command.DecisionHistoryReply](r, command.ChangeSetHistory, command.DecisionHistoryRequest{Agent: "agent:laura", Limit: 100, BudgetTokens: 10000})
	if len(h.Decisions) == 0 || !h.Decisions[len(h.Decisions)-1].ArgsTruncated {
		t.Errorf("history: %d decisions, the last one's args not marked cut", len(h.Decisions))
	}
	// The fitted set is a projection like any other: rebuilt from the
	// log, it is what the live projector stored, byte for byte.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := events.Replay(ctx, r.bus, &changesets.Projection{}, events.DefaultTopology())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Identical() || rep.Keys < 2 { // set.<id>, the agent's decisions
		t.Errorf("replay of the fitted set: %+v", rep)
	}
}

// rejectLargeSet proposes a set of MaxChangeItems items whose args carry
// doc, and rejects each item with reason.
func rejectLargeSet(r *rig, doc, reason string) string {
	var calls []command.ProposedCall
	for i := range events.MaxChangeItems {
		calls = append(calls, command.ProposedCall{Tool: "set_task_title", Args: map[string]any{"title": fmt.Sprint(i), "body": doc}})
	}
	id := r.propose(command.ProposeChangeSet{Calls: calls}).Sets[0].ID
	for i := 1; i <= events.MaxChangeItems; i++ {
		must[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{i}, Verdict: events.VerdictRejected, Reason: reason, By: "user:alice"})
	}
	return id
}

// resolvedInBucket waits until heed_changesets holds set id resolved, and
// returns it with the size of its value.
func resolvedInBucket(t *testing.T, r *rig, id string) (command.ChangeSetState, int) {
	t.Helper()
	kv, err := r.bus.JetStream().KeyValue(context.Background(), readmodel.ChangeSetsBucket)
	if err != nil {
		t.Fatal(err)
	}
	var st command.ChangeSetState
	size := 0
	eventstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		e, err := kv.Get(context.Background(), readmodel.ChangeSetKey(id))
		if err != nil {
			return fmt.Errorf("set %s not in the bucket: %v", id, err)
		}
		st, size = command.ChangeSetState{}, len(e.Value())
		if !readmodel.Decode(e.Value(), &st) || st.Status != events.SetResolved {
			return fmt.Errorf("set %s is %q in the bucket (%d bytes)", id, st.Status, size)
		}
		return nil
	})
	return st, size
}

// Sets that together pass what one reply holds: a list stops at 900 KiB
// and counts the rest in more.
func TestListStopsAtWhatAReplyHolds(t *testing.T) {
	r := newRig(t)
	r.start("changesets")
	doc := strings.Repeat("v", 3<<10) // 30 KiB a set: not cut, 40 sets pass 900 KiB
	const n = 40
	for s := range n {
		var calls []command.ProposedCall
		for i := range events.MaxChangeItems {
			calls = append(calls, command.ProposedCall{Tool: "set_task_title", Args: map[string]any{"title": fmt.Sprint(s, "-", i), "body": doc}})
		}
		r.propose(command.ProposeChangeSet{Calls: calls})
	}
	eventstest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		list := must[command.ListChangeSetsReply](r, command.ChangeSetList, command.ListChangeSets{All: true})
		if got := len(list.Sets) + list.More; got != n {
			return fmt.Errorf("%d sets listed and %d more, want %d in all", len(list.Sets), list.More, n)
		}
		return nil
	})
	list := must[command.ListChangeSetsReply](r, command.ChangeSetList, command.ListChangeSets{All: true})
	if list.More == 0 || len(list.Sets) == 0 || list.Sets[0].Items[0].ArgsTruncated {
		t.Errorf("list: %d sets, %d more; want a part of them, whole", len(list.Sets), list.More)
	}
	// Each page goes on from the last: every set once, newest first, the
	// open list (from memory) as the whole one (from the bucket).
	for _, all := range []bool{true, false} {
		var ids []string
		var at []time.Time
		req := command.ListChangeSets{All: all}
		for page := 0; ; page++ {
			if page > n {
				t.Fatalf("all %v: more than %d pages", all, n)
			}
			list := must[command.ListChangeSetsReply](r, command.ChangeSetList, req)
			for _, st := range list.Sets {
				ids = append(ids, st.ID)
				at = append(at, st.ProposedAt)
			}
			if list.More == 0 {
				if list.Next != "" {
					t.Errorf("all %v: the last page has next %q", all, list.Next)
				}
				break
			}
			if list.Next == "" || len(list.Sets) == 0 {
				t.Fatalf("all %v: %d sets and %d more, next %q", all, len(list.Sets), list.More, list.Next)
			}
			req.After = list.Next
		}
		seen := map[string]bool{}
		for i, id := range ids {
			if seen[id] {
				t.Errorf("all %v: %s listed twice", all, id)
			}
			seen[id] = true
			if i > 0 && at[i].After(at[i-1]) {
				t.Errorf("all %v: %s proposed after the set before it", all, id)
			}
		}
		if len(seen) != n {
			t.Errorf("all %v: %d sets over the pages, want %d", all, len(seen), n)
		}
	}
	if _, e := call[command.ListChangeSetsReply](r, command.ChangeSetList, command.ListChangeSets{After: "12.not valid"}); e == nil || e.Code != events.CodeInvalidRequest || !strings.Contains(e.Message, "after") {
		t.Errorf("a bad after: %v", e)
	}
}
