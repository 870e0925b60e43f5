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
