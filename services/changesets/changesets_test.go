package changesets_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/service/servicetest"
	"github.com/heedhq/heed/services/changesets"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

const tools = `
tools:
  set_task_title:
    command: true
    review: deferred
    summary: 'Set title to "{{ args.title }}"'
  set_task_priority:
    command: true
    review: deferred
  add_multiple_checklist_items:
    command: true
    review: deferred
    explode: {field: items, tool: add_checklist_item}
  add_checklist_item:
    command: true
    summary: 'Add checklist item: "{{ args.title }}"'
  update_report:
    command: true
`

type rig struct {
	t     *testing.T
	env   *eventstest.Env
	bus   *events.Bus
	nc    *nats.Conn
	tools string
}

func newRig(t *testing.T) *rig {
	env := eventstest.Start(t)
	path := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(path, []byte(tools), 0o644); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, env: env, bus: env.Bus(t), nc: env.Conn(t), tools: path}
}

func (r *rig) start(name string) (stop func()) {
	r.t.Helper()
	return servicetest.Start(r.t, r.env, name, func(ctx context.Context, rt *service.Runtime) error {
		return changesets.Run(ctx, rt, changesets.Config{ToolsFile: r.tools, ExpiryEvery: 50 * time.Millisecond})
	})
}

// call sends a command (waiting for the service to be up) and decodes its
// reply or its error reply.
func call[T any](r *rig, subject string, req any) (T, *command.ErrorReply) {
	r.t.Helper()
	var out T
	body, _ := json.Marshal(req)
	deadline := time.Now().Add(15 * time.Second)
	for {
		m, err := r.nc.Request(subject, body, 10*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			r.t.Fatalf("%s: %v", subject, err)
		}
		if m.Header.Get(micro.ErrorCodeHeader) != "" {
			var e command.ErrorReply
			_ = json.Unmarshal(m.Data, &e)
			return out, &e
		}
		if err := json.Unmarshal(m.Data, &out); err != nil {
			r.t.Fatalf("%s reply %q: %v", subject, m.Data, err)
		}
		return out, nil
	}
}

func must[T any](r *rig, subject string, req any) T {
	r.t.Helper()
	out, e := call[T](r, subject, req)
	if e != nil {
		r.t.Fatalf("%s: %v", subject, e)
	}
	return out
}

func (r *rig) propose(req command.ProposeChangeSet) command.ProposeReply {
	r.t.Helper()
	if req.Agent == "" {
		req.Agent, req.Subject = "agent:laura", "task-42"
	}
	return must[command.ProposeReply](r, command.ChangeSetPropose, req)
}

func title(s string) command.ProposedCall {
	return command.ProposedCall{Tool: "set_task_title", Args: map[string]any{"title": s}}
}

func (r *rig) count(id string, t events.Type) int {
	r.t.Helper()
	n := 0
	_, err := events.ReadHistory(context.Background(), r.bus.JetStream(), events.EventStream, t.Subject(id), 0, func(events.RawMsg) error { n++; return nil })
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// TestExpiresOnceAcrossRestart: an untouched set expires after its time,
// with the service down when the time came and two instances after it:
// exactly one expired event; its pending items are no decision, and a
// decision after it is refused.
func TestExpiresOnceAcrossRestart(t *testing.T) {
	r := newRig(t)
	stop := r.start("changesets")
	p := r.propose(command.ProposeChangeSet{Calls: []command.ProposedCall{title("a"), title("b")}, ExpiresS: 1.5})
	id := p.Sets[0].ID
	untouched := r.propose(command.ProposeChangeSet{Calls: []command.ProposedCall{title("u")}, ExpiresS: 1.5}).Sets[0].ID
	must[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{1}, Verdict: events.VerdictConfirmed, By: "user:alice"})
	stop()
	time.Sleep(2 * time.Second) // the time passes while no service runs
	if n := r.count(id, events.ChangeSetExpired); n != 0 {
		t.Fatalf("expired while no service ran: %d", n)
	}
	r.start("changesets-1")
	r.start("changesets-2")
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		st := must[command.ChangeSetState](r, command.ChangeSetStatus, command.ChangeSetStatusRequest{ID: id})
		if st.Status != events.SetExpired {
			return fmt.Errorf("status %s", st.Status)
		}
		if st.Items[0].Status != events.VerdictConfirmed || st.Items[1].Status != events.ItemExpired {
			return fmt.Errorf("items %+v", st.Items)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // both instances looked
	for _, set := range []string{id, untouched} {
		if n := r.count(set, events.ChangeSetExpired); n != 1 {
			t.Fatalf("%s: %d expired events, want exactly 1", set, n)
		}
	}
	if st := must[command.ChangeSetState](r, command.ChangeSetStatus, command.ChangeSetStatusRequest{ID: untouched}); st.Status != events.SetExpired || st.Items[0].Status != events.ItemExpired {
		t.Fatalf("the untouched set: %+v", st)
	}
	_, e := call[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{2}, Verdict: events.VerdictConfirmed, By: "user:alice"})
	if e == nil || e.Code != events.CodeConflict || !strings.Contains(e.Message, "expired") {
		t.Fatalf("a decision after the expiry: %v", e)
	}
	_, e = call[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: untouched, All: true, Verdict: events.VerdictConfirmed, By: "user:alice"})
	if e == nil || e.Code != events.CodeConflict || !strings.Contains(e.Message, "is expired: nothing is left to decide") {
		t.Fatalf("confirm all after the expiry: %v", e)
	}
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		h := must[command.DecisionHistoryReply](r, command.ChangeSetHistory, command.DecisionHistoryRequest{Agent: "agent:laura"})
		if !strings.Contains(h.Text, `- – set_task_title("b") — no decision (expired)`) || !strings.Contains(h.Text, `- ✓ set_task_title("a") — confirmed`) {
			return fmt.Errorf("history:\n%s", h.Text)
		}
		return nil
	})
	// Never proposed again: the same id is a conflict.
	if _, e := call[command.ProposeReply](r, command.ChangeSetPropose, command.ProposeChangeSet{ID: id, Agent: "agent:laura", Subject: "task-42", Calls: []command.ProposedCall{title("c")}}); e == nil || e.Code != events.CodeConflict {
		t.Fatalf("proposing an expired set's id again: %v", e)
	}
}

// TestProposalRules: what is queued and what is refused.
func TestProposalRules(t *testing.T) {
	r := newRig(t)
	r.start("changesets")
	for name, c := range map[string]struct {
		call command.ProposedCall
		want string
	}{
		"immediate tool": {command.ProposedCall{Tool: "update_report", Args: map[string]any{"text": "x"}}, "an immediate tool is not reviewed: call it directly"},
		"unknown tool":   {command.ProposedCall{Tool: "drop_database"}, "unknown tool"},
		"empty batch":    {command.ProposedCall{Tool: "add_multiple_checklist_items", Args: map[string]any{"items": []any{}}}, "a batch call needs a non-empty list in args.items"},
	} {
		_, e := call[command.ProposeReply](r, command.ChangeSetPropose, command.ProposeChangeSet{Agent: "a", Subject: "s", Calls: []command.ProposedCall{title("ok"), c.call}})
		if e == nil || e.Code != events.CodeInvalidRequest || !strings.Contains(e.Message, c.want) || !strings.Contains(e.Message, "call 2") {
			t.Errorf("%s: %v", name, e)
		}
	}
	// 23 items: parts of 10, 10 and 3, each naming the others.
	var items []any
	for i := range 21 {
		items = append(items, map[string]any{"title": fmt.Sprintf("item %d", i+1)})
	}
	p := r.propose(command.ProposeChangeSet{ID: "cs-big", Calls: []command.ProposedCall{title("x"), {Tool: "set_task_priority", Args: map[string]any{"priority": "P2"}},
		{Tool: "add_multiple_checklist_items", Args: map[string]any{"task": "t1", "items": items}}}})
	if p.Queued != 23 || len(p.Sets) != 3 || p.Sets[0].ID != "cs-big" || p.Sets[1].ID != "cs-big-p2" || p.Sets[2].ID != "cs-big-p3" || len(p.Sets[2].Items) != 3 {
		t.Fatalf("parts: %+v", p)
	}
	if p.Sets[0].Items[1].Summary != `set_task_priority("P2")` || p.Sets[0].Items[2].Summary != `Add checklist item: "item 1"` || p.Sets[1].Items[0].ID != "cs-big-p2/1" {
		t.Errorf("summaries and ids: %+v", p.Sets[0].Items)
	}
	st := must[command.ChangeSetState](r, command.ChangeSetStatus, command.ChangeSetStatusRequest{ID: "cs-big-p2"})
	if st.Proposal.Part != 2 || st.Proposal.Parts != 3 || strings.Join(st.Proposal.Related, ",") != "cs-big,cs-big-p3" || st.Items[0].Args["task"] != "t1" || st.Items[0].Args["title"] != "item 9" {
		t.Errorf("part 2: %+v", st.Proposal)
	}
	// The same proposal again returns the same sets; other content is a conflict.
	again := r.propose(command.ProposeChangeSet{ID: "cs-big", Calls: []command.ProposedCall{title("x"), {Tool: "set_task_priority", Args: map[string]any{"priority": "P2"}},
		{Tool: "add_multiple_checklist_items", Args: map[string]any{"task": "t1", "items": items}}}})
	if len(again.Sets) != 3 || again.Sets[2].ID != "cs-big-p3" || r.count("cs-big", events.ChangeSetProposed) != 1 {
		t.Fatalf("a repeated proposal: %+v", again)
	}
	if _, e := call[command.ProposeReply](r, command.ChangeSetPropose, command.ProposeChangeSet{ID: "cs-big", Agent: "agent:laura", Subject: "task-42", Calls: []command.ProposedCall{title("y")}}); e == nil || e.Code != events.CodeConflict {
		t.Fatalf("other content under the same id: %v", e)
	}
	// Listing: open sets of the agent, newest first.
	l := must[command.ListChangeSetsReply](r, command.ChangeSetList, command.ListChangeSets{Agent: "agent:laura"})
	if len(l.Sets) != 3 {
		t.Errorf("list: %d sets", len(l.Sets))
	}

	// A named part that exists with other content refuses the whole
	// proposal before anything is written (it wrote part 1, pointing at
	// a part 2 that never came).
	r.propose(command.ProposeChangeSet{ID: "csa-p2", Calls: []command.ProposedCall{title("mine")}})
	var eleven []command.ProposedCall
	for i := range 11 {
		eleven = append(eleven, title(fmt.Sprintf("t%d", i)))
	}
	if _, e := call[command.ProposeReply](r, command.ChangeSetPropose, command.ProposeChangeSet{ID: "csa", Agent: "agent:laura", Subject: "task-42", Calls: eleven}); e == nil || e.Code != events.CodeConflict || !strings.Contains(e.Message, "nothing was queued") {
		t.Fatalf("a proposal whose part 2 exists: %v", e)
	}
	if n := r.count("csa", events.ChangeSetProposed); n != 0 {
		t.Fatalf("the refused proposal wrote its part 1 (%d events)", n)
	}
	// The same proposal sent twice at once: both get the set (one wrote
	// it), neither a conflict.
	twice := command.ProposeChangeSet{ID: "cs-twice", Agent: "agent:laura", Subject: "task-42", Calls: []command.ProposedCall{title("once")}}
	errs := make(chan *command.ErrorReply, 8)
	for range 8 {
		go func() {
			_, e := call[command.ProposeReply](r, command.ChangeSetPropose, twice)
			errs <- e
		}()
	}
	for range 8 {
		if e := <-errs; e != nil {
			t.Errorf("the same proposal at once: %v", e)
		}
	}
	if n := r.count("cs-twice", events.ChangeSetProposed); n != 1 {
		t.Errorf("the same proposal at once wrote %d proposals", n)
	}
	// A summary longer than a summary may be is cut, with its ellipsis,
	// to what the event allows: a title of 1,000 characters was refused
	// by the event's schema after part 1 was written.
	long := append(eleven[:10:10], title(strings.Repeat("y", 1000)))
	lp := r.propose(command.ProposeChangeSet{Calls: long})
	if len(lp.Sets) != 2 || len(lp.Sets[1].Items) != 1 || len([]rune(lp.Sets[1].Items[0].Summary)) > 1000 || !strings.HasSuffix(lp.Sets[1].Items[0].Summary, "…") {
		t.Fatalf("a long summary: %+v", lp)
	}
}

// TestFirstDecisionWins: ten people decide the same item at once: one
// decision takes effect, the others are told whose did.
func TestFirstDecisionWins(t *testing.T) {
	r := newRig(t)
	r.start("changesets")
	id := r.propose(command.ProposeChangeSet{Calls: []command.ProposedCall{title("a"), title("b")}}).Sets[0].ID
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	for i := range 10 {
		wg.Go(func() {
			verdict := []string{events.VerdictConfirmed, events.VerdictRejected, events.VerdictDeferred}[i%3]
			_, e := call[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{1}, Verdict: verdict, By: fmt.Sprintf("user:%d", i), Channel: "web"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e == nil:
				won++
			case e.Code == events.CodeConflict && strings.Contains(e.Message, "item 1 was already"):
				lost++
			default:
				t.Errorf("decision %d: %v", i, e)
			}
		})
	}
	wg.Wait()
	if won != 1 || lost != 9 {
		t.Fatalf("won %d, lost %d", won, lost)
	}
	if n := r.count(id, events.ChangeSetDecided); n != 1 {
		t.Fatalf("%d decided events", n)
	}
	// Confirm all decides what is left and reports what was decided.
	rep := must[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, All: true, Verdict: events.VerdictConfirmed, By: "user:alice"})
	if len(rep.Decided) != 1 || rep.Decided[0].Item != 2 || rep.Status != events.SetResolved {
		t.Fatalf("confirm all: %+v", rep)
	}
}

// TestReviewersAndOutsideDecisions: a set that names its reviewers
// refuses anyone else; a decided event written straight to the log that
// does not take effect is refused visibly, with the decision that did.
func TestReviewersAndOutsideDecisions(t *testing.T) {
	r := newRig(t)
	r.start("changesets")
	id := r.propose(command.ProposeChangeSet{Calls: []command.ProposedCall{title("a"), title("b")}, Reviewers: []string{"user:alice"}}).Sets[0].ID
	_, e := call[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{1}, Verdict: events.VerdictConfirmed, By: "user:mallory"})
	if e == nil || e.Code != events.CodeInvalidRequest || !strings.Contains(e.Message, "user:mallory may not decide") {
		t.Fatalf("a decision by someone else: %v", e)
	}
	must[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{1}, Verdict: events.VerdictConfirmed, By: "user:alice", Channel: "cli"})
	// An outside writer decides item 1 again, item 2 as mallory, item 9.
	ev, err := events.NewEvent(events.ChangeSetDecided, id, "outside-1", "agent/outside", events.ChangeSetDecidedData{
		Decisions: []events.ChangeDecision{{Item: 1, Verdict: events.VerdictRejected}, {Item: 9, Verdict: events.VerdictRejected}}, By: "user:alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.bus.Publish(context.Background(), &ev); err != nil {
		t.Fatal(err)
	}
	var refused events.ChangeSetRefusedData
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		n := 0
		_, err := events.ReadHistory(context.Background(), r.bus.JetStream(), events.EventStream, events.ChangeSetRefused.Subject(id), 0, func(raw events.RawMsg) error {
			n++
			d, err := r.bus.Codec().DecodeStored(raw)
			if err != nil {
				return err
			}
			return json.Unmarshal(d.Data(), &refused)
		})
		if err != nil || n != 1 {
			return fmt.Errorf("%d refused events (%v)", n, err)
		}
		return nil
	})
	if refused.DecisionID != "outside-1" || len(refused.Refused) != 2 || refused.Refused[0].Code != events.ChangeRefusedDecided || refused.Refused[0].Winner == nil ||
		refused.Refused[0].Winner.By != "user:alice" || refused.Refused[1].Code != events.ChangeRefusedNoItem {
		t.Fatalf("refused: %+v", refused)
	}
	st, err := changeset.Load(context.Background(), r.bus, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Items[0].Status != events.VerdictConfirmed || st.Refused != 2 {
		t.Fatalf("state after the outside decision: %+v", st)
	}
}

// TestKeepsProposingRejected: an agent whose items of one tool are
// rejected three times in a row is flagged in its counts (heed stats
// shows them); a confirmation of that tool clears the streak.
func TestKeepsProposingRejected(t *testing.T) {
	r := newRig(t)
	r.start("changesets")
	for i := range 3 {
		id := r.propose(command.ProposeChangeSet{Calls: []command.ProposedCall{{Tool: "set_task_priority", Args: map[string]any{"priority": "P1"}}, title(fmt.Sprint(i))}}).Sets[0].ID
		must[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{1}, Verdict: events.VerdictRejected, Reason: fmt.Sprintf("not P1 (%d)", i), By: "user:alice"})
		must[command.DecideReply](r, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{2}, Verdict: events.VerdictConfirmed, By: "user:alice"})
	}
	kv, err := r.bus.JetStream().KeyValue(context.Background(), readmodel.ChangeSetsBucket)
	if err != nil {
		t.Fatal(err)
	}
	var st readmodel.ChangeStats
	eventstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		e, err := kv.Get(context.Background(), readmodel.ChangeStatsKey("agent:laura"))
		if err != nil || !readmodel.Decode(e.Value(), &st) {
			return fmt.Errorf("no stats yet (%v)", err)
		}
		if st.Tools["set_task_priority"].Rejected != 3 || st.Tools["set_task_title"].Confirmed != 3 {
			return fmt.Errorf("stats %+v", st) // the projection has not folded every decision yet
		}
		return nil
	})
	prio, ttl := st.Tools["set_task_priority"], st.Tools["set_task_title"]
	if !prio.KeepsProposingRejected() || prio.LastReason != "not P1 (2)" || prio.Proposed != 3 || ttl.KeepsProposingRejected() || ttl.Confirmed != 3 {
		t.Fatalf("stats %+v", st)
	}
	// The log these sets wrote, through the projection with a crash
	// before each write of each event and its redelivery after.
	var log []*events.Event
	_, err = events.ReadLog(context.Background(), r.bus.JetStream(), events.EventStream, []string{"heed.changeset.>"}, 0, func(m events.RawMsg) error {
		ev, err := r.bus.Codec().DecodeStored(m)
		if err != nil {
			return err
		}
		log = append(log, ev)
		return nil
	})
	if err != nil || len(log) < 9 {
		t.Fatalf("the sets' log: %d events (%v)", len(log), err)
	}
	eventstest.CrashSafe(t, &changesets.Projection{}, log)
}
