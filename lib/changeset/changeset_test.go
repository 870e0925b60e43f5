package changeset_test

import (
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/tool"
)

const tools = `tools:
  set_title: {command: a, review: deferred, summary: 'Set title to "{{ args.title }}"'}
  set_priority: {command: a, review: deferred}
  add_items: {command: a, review: deferred, explode: {field: items, tool: add_item}}
  add_item: {command: a, summary: 'Add "{{ args.title }}"'}
  read: {command: a}
`

func TestItemsAndParts(t *testing.T) {
	reg, err := tool.Load("t.yaml", []byte(tools))
	if err != nil {
		t.Fatal(err)
	}
	var elems []any
	for i := range 11 {
		elems = append(elems, map[string]any{"title": string(rune('a' + i))})
	}
	items, err := changeset.Items(reg, []command.ProposedCall{
		{Tool: "set_title", Args: map[string]any{"title": "T"}, Before: map[string]any{"title": "old"}},
		{Tool: "set_priority", Args: map[string]any{"priority": "P2"}, Summary: "Make it P2"},
		{Tool: "add_items", Args: map[string]any{"task": "t1", "items": elems}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 13 || items[0].Summary != `Set title to "T"` || items[1].Summary != "Make it P2" || items[2].Tool != "add_item" ||
		items[2].Summary != `Add "a"` || items[2].Args["task"] != "t1" || items[2].From != "add_items" || items[2].Group != "add_items" {
		t.Fatalf("items %+v", items)
	}
	ids, parts := changeset.Parts("cs-1", items)
	if len(parts) != 2 || ids[1] != "cs-1-p2" || len(parts[1]) != 3 || parts[1][0].Item != 1 || parts[0][9].Item != 10 {
		t.Fatalf("parts %v %+v", ids, parts)
	}
	if _, err := changeset.Items(reg, []command.ProposedCall{{Tool: "read"}}); err == nil || !strings.Contains(err.Error(), "call 1 (read): an immediate tool") {
		t.Errorf("an immediate tool: %v", err)
	}
	if got := changeset.Describe("update_estimate", map[string]any{"minutes": 120, "task": "t1"}); got != `update_estimate(minutes=120, task="t1")` {
		t.Errorf("describe %q", got)
	}
	st := &command.ChangeItemState{ChangeItem: items[0]}
	if p := changeset.Preview(st); len(p) != 1 || p[0] != (changeset.Change{Field: "title", Before: "old", After: "T"}) {
		t.Errorf("preview %+v", p)
	}
}

// TestFirstDecisionWins: the fold takes each item's first valid decision
// in log order and refuses the rest with why.
func TestFirstDecisionWins(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	apply := func(st *command.ChangeSetState, typ events.Type, id string, data any) []events.ChangeRefusal {
		ev, err := events.NewEvent(typ, st.ID, id, "test", data)
		if err != nil {
			t.Fatal(err)
		}
		ev.SetTime(at)
		r, err := changeset.Apply(st, &ev, st.Seq+1)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	st := changeset.New("cs-1")
	if r := apply(st, events.ChangeSetDecided, "d0", events.ChangeSetDecidedData{Decisions: []events.ChangeDecision{{Item: 1, Verdict: "confirmed"}}, By: "a"}); len(r) != 1 || r[0].Code != events.ChangeRefusedNoProposal {
		t.Errorf("a decision before the proposal: %+v", r)
	}
	apply(st, events.ChangeSetProposed, "p", events.ChangeSetProposedData{Agent: "a", Subject: "s", ProposedBy: "a", Reviewers: []string{"alice", "bob"},
		Items: []events.ChangeItem{{Item: 1, Tool: "t", Summary: "one"}, {Item: 2, Tool: "t", Summary: "two"}}})
	if st.Status != events.SetPending {
		t.Fatalf("status %s", st.Status)
	}
	r := apply(st, events.ChangeSetDecided, "d1", events.ChangeSetDecidedData{Decisions: []events.ChangeDecision{{Item: 1, Verdict: "rejected", Reason: "no"}, {Item: 1, Verdict: "confirmed"}, {Item: 3, Verdict: "confirmed"}}, By: "alice"})
	if len(r) != 2 || r[0].Code != events.ChangeRefusedDecided || r[0].Winner.By != "alice" || r[1].Code != events.ChangeRefusedNoItem || st.Status != events.SetPartiallyResolved {
		t.Fatalf("refusals %+v, status %s", r, st.Status)
	}
	if r := apply(st, events.ChangeSetDecided, "d2", events.ChangeSetDecidedData{Decisions: []events.ChangeDecision{{Item: 2, Verdict: "confirmed"}}, By: "mallory"}); len(r) != 1 || r[0].Code != events.ChangeRefusedNotAllowed {
		t.Errorf("a decision by someone else: %+v", r)
	}
	apply(st, events.ChangeSetExpired, "e", events.ChangeSetExpiredData{Items: []int{2}})
	if st.Status != events.SetExpired || st.Items[1].Status != events.ItemExpired || st.Items[0].Status != events.VerdictRejected {
		t.Fatalf("after the expiry %+v", st)
	}
	if r := apply(st, events.ChangeSetDecided, "d3", events.ChangeSetDecidedData{Decisions: []events.ChangeDecision{{Item: 2, Verdict: "confirmed"}}, By: "bob"}); len(r) != 1 || r[0].Code != events.ChangeRefusedExpired {
		t.Errorf("a decision after the expiry: %+v", r)
	}
}

func TestHistoryKeepsToItsBudget(t *testing.T) {
	var recs []command.ChangeDecisionRecord
	for range 40 {
		recs = append(recs, command.ChangeDecisionRecord{Tool: "set_title", Args: map[string]any{"title": strings.Repeat("x", 40)}, Verdict: "rejected", Reason: "too long"})
	}
	text, used, omitted := changeset.History(recs, 20, 500)
	if changeset.Tokens(text) > 500 || len(used)+omitted != 40 || len(used) == 0 || len(used) > 20 {
		t.Errorf("%d tokens, %d used, %d omitted:\n%s", changeset.Tokens(text), len(used), omitted, text)
	}
}

// A call without an argument its tool's argv needs is refused when
// proposed: confirmed later, it would have run against an empty word.
func TestItemsNeedTheArgsTheirToolRenders(t *testing.T) {
	reg, err := tool.Load("t.yaml", []byte(`tools:
  set_title: {command: a, review: deferred, args: ["title", "{{ args.task }}", "{{ args.title }}"]}
  add_items: {command: a, review: deferred, explode: {field: items, tool: add_item}}
  add_item: {command: a, args: ["add", "{{ args.task }}", "{{ args.title }}", "{{ args.note ?? \"\" }}"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		call command.ProposedCall
		want string
	}{
		"no task": {command.ProposedCall{Tool: "set_title", Args: map[string]any{"title": "Fix login bug"}},
			"call 2 (set_title): tool set_title args[1]: {{ args.task }} has no value"},
		"an element without its title": {command.ProposedCall{Tool: "add_items", Args: map[string]any{"task": "t1", "items": []any{map[string]any{"title": "a"}, map[string]any{"note": "b"}}}},
			"call 2 (add_items): args.items[1]: tool add_item args[2]: {{ args.title }} has no value"},
	} {
		ok := command.ProposedCall{Tool: "set_title", Args: map[string]any{"task": "t1", "title": "T"}}
		if _, err := changeset.Items(reg, []command.ProposedCall{ok, c.call}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	items, err := changeset.Items(reg, []command.ProposedCall{{Tool: "add_items", Args: map[string]any{"task": "t1", "items": []any{map[string]any{"title": "a"}}}}})
	if err != nil || len(items) != 1 {
		t.Errorf("an element with what its tool needs (the note may be left out): %v %+v", err, items)
	}
}
