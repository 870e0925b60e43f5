package runner_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/services/changesets"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go/micro"
)

var updateHistory = flag.Bool("update-history", false, "rewrite testdata/decision_history.golden")

// task is the state the task helper keeps (HEED_TASK_DIR/task.json).
type task struct {
	Title    string   `json:"title"`
	Estimate string   `json:"estimate,omitempty"`
	Items    []string `json:"items"`
}

// taskHelper is an exec tool over a task: title T, estimate M, item T,
// check-title BEFORE (fails, saying why, when the title is no longer
// BEFORE). A call whose $HEED_IDEMPOTENCY_KEY is in the ledger does
// nothing again; every call is appended to calls.log, every change to
// ledger.log; $HEED_TASK_SLEEP makes item calls slow.
func taskHelper(args []string) int {
	dir := os.Getenv("HEED_TASK_DIR")
	appendLine := func(name, line string) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = f.WriteString(line + "\n")
			_ = f.Close()
		}
	}
	key := os.Getenv("HEED_IDEMPOTENCY_KEY")
	appendLine("calls.log", key+" "+strings.Join(args, " "))
	var t task
	b, _ := os.ReadFile(filepath.Join(dir, "task.json"))
	_ = json.Unmarshal(b, &t)
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: title|estimate|item|check-title VALUE")
		return 2
	}
	if args[0] == "check-title" {
		if t.Title != args[1] {
			fmt.Fprintf(os.Stderr, "the title is now %q (it was %q when proposed)\n", t.Title, args[1])
			return 1
		}
		fmt.Println(`{"current":true}`)
		return 0
	}
	ledger, _ := os.ReadFile(filepath.Join(dir, "ledger.log"))
	for _, l := range strings.Split(string(ledger), "\n") {
		if k, _, _ := strings.Cut(l, " "); k == key && key != "" {
			fmt.Println(`{"ok":true,"again":true}`)
			return 0
		}
	}
	if args[0] == "item" {
		if d, err := time.ParseDuration(os.Getenv("HEED_TASK_SLEEP")); err == nil {
			time.Sleep(d)
		}
	}
	switch args[0] {
	case "title":
		t.Title = args[1]
	case "estimate":
		t.Estimate = args[1]
	case "item":
		t.Items = append(t.Items, args[1])
	default:
		fmt.Fprintln(os.Stderr, "unknown op", args[0])
		return 2
	}
	b, _ = json.Marshal(t)
	_ = os.WriteFile(filepath.Join(dir, "task.json"), b, 0o644)
	appendLine("ledger.log", key+" "+strings.Join(args, " "))
	fmt.Println(`{"ok":true}`)
	return 0
}

// taskTools is a tools file of the seed's task tools over a task in dir.
func taskTools(t *testing.T, dir string, slow time.Duration) string {
	env := fmt.Sprintf(`{GORACE: "atexit_sleep_ms=0", HEED_TASK_HELPER: "1", HEED_TASK_DIR: %q, HEED_TASK_SLEEP: %q}`, dir, slow.String())
	text := strings.ReplaceAll(`tools:
  set_task_title:
    command: SELF
    set_env: `+env+`
    args: ["title", "{{ args.title }}"]
    review: deferred
    summary: 'Set title to "{{ args.title }}"'
    check: check_task_title
  check_task_title:
    command: SELF
    set_env: `+env+`
    args: ["check-title", "{{ args.before.title }}"]
  update_task_estimate:
    command: SELF
    set_env: `+env+`
    args: ["estimate", "{{ args.minutes }}"]
    review: deferred
    summary: "Set estimate to {{ args.minutes }} min"
  add_multiple_checklist_items:
    command: SELF
    set_env: `+env+`
    args: ["items"]
    review: deferred
    group: Checklist items
    explode: {field: items, tool: add_checklist_item}
  add_checklist_item:
    command: SELF
    set_env: `+env+`
    args: ["item", "{{ args.title }}"]
    summary: 'Add checklist item: "{{ args.title }}"'
  update_report:
    command: SELF
    set_env: `+env+`
    args: ["report", "{{ args.text }}"]
`, "SELF", strconv.Quote(self(t)))
	path := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeTask(t *testing.T, dir string, tk task) {
	b, _ := json.Marshal(tk)
	if err := os.WriteFile(filepath.Join(dir, "task.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// call sends a command and decodes its reply, or returns its error reply.
func call[T any](h *harness, subject string, req any) (T, *command.ErrorReply) {
	h.t.Helper()
	var out T
	body, err := json.Marshal(req)
	if err != nil {
		h.t.Fatal(err)
	}
	m := h.request(subject, body)
	if m.Header.Get(micro.ErrorCodeHeader) != "" {
		var e command.ErrorReply
		_ = json.Unmarshal(m.Data, &e)
		return out, &e
	}
	if err := json.Unmarshal(m.Data, &out); err != nil {
		h.t.Fatalf("%s reply %q: %v", subject, m.Data, err)
	}
	return out, nil
}

func must[T any](h *harness, subject string, req any) T {
	h.t.Helper()
	out, e := call[T](h, subject, req)
	if e != nil {
		h.t.Fatalf("%s: %s", subject, e.Error())
	}
	return out
}

func (h *harness) changesets(tools string) {
	h.t.Helper()
	h.service("changesets", func(ctx context.Context, rt *service.Runtime) error {
		return changesets.Run(ctx, rt, changesets.Config{ToolsFile: tools, ExpiryEvery: 100 * time.Millisecond})
	})
}

// waitSet waits until the set's state satisfies until.
func (h *harness) waitSet(id string, total time.Duration, what string, until func(*command.ChangeSetState) bool) *command.ChangeSetState {
	h.t.Helper()
	deadline := time.Now().Add(total)
	for {
		st, err := changeset.Load(h.ctx(), h.bus, id)
		if err == nil && until(st) {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("change set %s: not %s within %s: %+v (err %v)", id, what, total, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wakeCalls are the seed's agent wake: two deferred calls and a batch of
// five checklist items.
func wakeCalls() []command.ProposedCall {
	return []command.ProposedCall{
		{Tool: "set_task_title", Args: map[string]any{"title": "Fix login bug"}, Before: map[string]any{"title": "login"}},
		{Tool: "update_task_estimate", Args: map[string]any{"minutes": 120}},
		{Tool: "add_multiple_checklist_items", Args: map[string]any{"items": []any{
			map[string]any{"title": "Design mockup"}, map[string]any{"title": "Implement API"}, map[string]any{"title": "Write tests"},
			map[string]any{"title": "Deploy to staging"}, map[string]any{"title": "Run smoke tests"}}}},
	}
}

// TestChangeSetReviewedAndAppliedOnceAcrossKill is issue 16's acceptance:
// an agent wake proposes 2 deferred calls and a batch of 5 checklist
// items, a set of 7 items; the person confirms 4 of the batch, rejects 1
// with a reason, defers the estimate and confirms the title; the runner is
// killed with SIGKILL while it applies them and a new one finishes: exactly
// the confirmed items are applied, once each; the set goes pending →
// partially resolved → resolved; the next wake's decision history lists
// the 7 decisions (golden text).
func TestChangeSetReviewedAndAppliedOnceAcrossKill(t *testing.T) {
	bin := buildRunner(t)
	h := newHarness(t)
	dir := t.TempDir()
	writeTask(t, dir, task{Title: "login"})
	// Each call takes 1.5 s: the kill must land during one, on a loaded
	// machine too (5 items applied after it: well within the 30 s wait).
	tools := taskTools(t, dir, 1500*time.Millisecond)
	h.changesets(tools)

	prop := must[command.ProposeReply](h, command.ChangeSetPropose, command.ProposeChangeSet{Agent: "agent:laura", Subject: "task-42", Wake: "wake-1", Calls: wakeCalls()})
	if len(prop.Sets) != 1 || prop.Queued != 7 || len(prop.Sets[0].Items) != 7 {
		t.Fatalf("want one set of 7 items, got %+v", prop)
	}
	id := prop.Sets[0].ID
	if !strings.Contains(prop.Message, "7 changes queued for review in "+id) {
		t.Errorf("message %q", prop.Message)
	}
	var summaries []string
	for _, it := range prop.Sets[0].Items {
		summaries = append(summaries, it.Summary)
	}
	wantSummaries := []string{`Set title to "Fix login bug"`, "Set estimate to 120 min", `Add checklist item: "Design mockup"`, `Add checklist item: "Implement API"`,
		`Add checklist item: "Write tests"`, `Add checklist item: "Deploy to staging"`, `Add checklist item: "Run smoke tests"`}
	if !slices.Equal(summaries, wantSummaries) {
		t.Errorf("summaries\n got %q\nwant %q", summaries, wantSummaries)
	}
	st := h.waitSet(id, 5*time.Second, "pending", func(st *command.ChangeSetState) bool { return st.Status == events.SetPending })
	if st.Items[2].From != "add_multiple_checklist_items" || st.Items[2].Tool != "add_checklist_item" || st.Items[2].Group != "Checklist items" {
		t.Errorf("exploded item: %+v", st.Items[2].ChangeItem)
	}

	first, _ := runnerProcess(t, bin, h.env.URL(), tools, "runner 1")
	firstDone := make(chan struct{})
	go func() { _ = first.Wait(); close(firstDone) }()
	t.Cleanup(func() { _ = first.Process.Kill(); <-firstDone })

	decide := func(items []int, verdict, reason string) command.DecideReply {
		return must[command.DecideReply](h, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: items, Verdict: verdict, Reason: reason, By: "user:alice", Channel: "cli"})
	}
	if r := decide([]int{3, 4, 5, 6}, events.VerdictConfirmed, ""); r.Status != events.SetPartiallyResolved || len(r.Decided) != 4 {
		t.Fatalf("confirm 4 of the batch: %+v", r)
	}
	// The first checklist item is being applied (slow): kill the runner.
	calls := filepath.Join(dir, "calls.log")
	deadline := time.Now().Add(30 * time.Second)
	for len(readLines(t, calls)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("runner 1 never called the first confirmed item's tool")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-firstDone
	killed := changeset.Item(h.waitSet(id, 5*time.Second, "read", func(*command.ChangeSetState) bool { return true }), 3)
	if killed.Apply != events.ApplyApplying {
		t.Fatalf("item 3 at the kill: %+v (want applying: the kill must land during the call)", killed)
	}

	if r := decide([]int{7}, events.VerdictRejected, "smoke tests run in CI"); r.Status != events.SetPartiallyResolved {
		t.Fatalf("reject: %+v", r)
	}
	decide([]int{2}, events.VerdictDeferred, "")
	if r := decide([]int{1}, events.VerdictConfirmed, ""); r.Status != events.SetResolved {
		t.Fatalf("the last decision: %+v, want resolved", r)
	}
	// A second decision on a decided item is refused, naming the first.
	if _, e := call[command.DecideReply](h, command.ChangeSetDecide, command.DecideChangeSet{ID: id, Items: []int{7}, Verdict: events.VerdictConfirmed, By: "user:bob", Channel: "slack"}); e == nil ||
		e.Code != events.CodeConflict || !strings.Contains(e.Message, "item 7 was already rejected by user:alice via cli") {
		t.Errorf("a second decision: %v", e)
	}

	second, _ := runnerProcess(t, bin, h.env.URL(), tools, "runner 2")
	stop, _ := stopOnSIGTERM(t, second)
	defer stop()
	st = h.waitSet(id, 30*time.Second, "applied", func(st *command.ChangeSetState) bool { return len(changeset.ToApply(st)) == 0 })
	for _, it := range st.Items {
		want := map[int]string{1: events.ApplyApplied, 3: events.ApplyApplied, 4: events.ApplyApplied, 5: events.ApplyApplied, 6: events.ApplyApplied}[it.Item]
		if it.Apply != want {
			t.Errorf("item %d (%s): apply %q, want %q (error %v)", it.Item, it.Status, it.Apply, want, it.Error)
		}
	}
	// Exactly the confirmed items took effect, once each.
	var applied []string
	for _, l := range readLines(t, filepath.Join(dir, "ledger.log")) {
		key, what, _ := strings.Cut(l, " ")
		if !strings.HasPrefix(key, "changeset/"+id+"/") {
			t.Errorf("ledger line without the item's key: %q", l)
		}
		applied = append(applied, what)
	}
	slices.Sort(applied)
	wantApplied := []string{"item Deploy to staging", "item Design mockup", "item Implement API", "item Write tests", "title Fix login bug"}
	if !slices.Equal(applied, wantApplied) {
		t.Errorf("applied\n got %q\nwant %q", applied, wantApplied)
	}
	// The interrupted item was called again with the same key.
	seen := map[string]int{}
	for _, l := range readLines(t, calls) {
		k, _, _ := strings.Cut(l, " ")
		seen[k]++
	}
	if seen[events.ChangeIdempotencyKey(id, 3)] < 1 {
		t.Errorf("item 3 calls: %v", seen)
	}
	var tk task
	b, _ := os.ReadFile(filepath.Join(dir, "task.json"))
	_ = json.Unmarshal(b, &tk)
	if tk.Title != "Fix login bug" || tk.Estimate != "" || len(tk.Items) != 4 {
		t.Errorf("task after applying: %+v", tk)
	}
	// Each item's apply events: started (once per attempt), one result.
	counts := map[string]int{}
	for _, ev := range h.log(events.SubjectFilter("changeset", id)) {
		counts[ev.Type()]++
	}
	if counts[string(events.ChangeApplyCompleted)] != 5 || counts[string(events.ChangeApplyFailed)] != 0 || counts[string(events.ChangeApplyStarted)] != 5 {
		t.Errorf("apply events: %v", counts)
	}

	// The next wake reads the 7 decisions.
	hist := h.waitHistory("agent:laura", 7)
	golden := filepath.Join("testdata", "decision_history.golden")
	if *updateHistory {
		if err := os.WriteFile(golden, []byte(hist.Text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if hist.Text != string(want) {
		t.Errorf("decision history\n got:\n%s\nwant:\n%s", hist.Text, want)
	}
	if hist.Tokens > changeset.DefaultHistoryBudget || len(hist.Decisions) != 7 || hist.Omitted != 0 {
		t.Errorf("history: %d tokens, %d decisions, %d omitted", hist.Tokens, len(hist.Decisions), hist.Omitted)
	}
}

func (h *harness) waitHistory(agent string, n int) command.DecisionHistoryReply {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hist := must[command.DecisionHistoryReply](h, command.ChangeSetHistory, command.DecisionHistoryRequest{Agent: agent})
		done := len(hist.Decisions) >= n
		for _, d := range hist.Decisions {
			if d.Verdict == events.VerdictConfirmed && d.Applied == "" {
				done = false // the projection has the decision, not yet the result
			}
		}
		if done {
			return hist
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("history of %s: %d decisions within 10s, want %d: %+v", agent, len(hist.Decisions), n, hist)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestChangeSetStaleItemNotApplied: an item whose target changed since the
// proposal is not applied, and says why.
func TestChangeSetStaleItemNotApplied(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	writeTask(t, dir, task{Title: "login"})
	tools := taskTools(t, dir, 0)
	h.changesets(tools)
	h.runner(runner.Config{ToolsFile: tools})
	prop := must[command.ProposeReply](h, command.ChangeSetPropose, command.ProposeChangeSet{Agent: "agent:laura", Subject: "task-42",
		Calls: []command.ProposedCall{{Tool: "set_task_title", Args: map[string]any{"title": "Fix login bug"}, Before: map[string]any{"title": "login"}}}})
	id := prop.Sets[0].ID
	// Someone renames the task before the person confirms.
	writeTask(t, dir, task{Title: "Login fails on Safari"})
	must[command.DecideReply](h, command.ChangeSetDecide, command.DecideChangeSet{ID: id, All: true, Verdict: events.VerdictConfirmed, By: "user:alice"})
	st := h.waitSet(id, 15*time.Second, "applied", func(st *command.ChangeSetState) bool { return len(changeset.ToApply(st)) == 0 })
	it := st.Items[0]
	if it.Apply != events.ApplyFailed || !it.Stale || it.Error == nil ||
		!strings.Contains(it.Error.Message, `the title is now "Login fails on Safari" (it was "login" when proposed)`) {
		t.Fatalf("stale item: %+v (error %+v)", it, it.Error)
	}
	var tk task
	b, _ := os.ReadFile(filepath.Join(dir, "task.json"))
	_ = json.Unmarshal(b, &tk)
	if tk.Title != "Login fails on Safari" {
		t.Errorf("the newer title was overwritten: %q", tk.Title)
	}
	if got := readLines(t, filepath.Join(dir, "ledger.log")); len(got) != 0 {
		t.Errorf("a stale item changed the task: %q", got)
	}
	hist := h.waitHistory("agent:laura", 1)
	if !strings.Contains(hist.Text, `✓ set_task_title("Fix login bug") — confirmed, not applied (stale): the title is now`) {
		t.Errorf("history does not say the item was stale:\n%s", hist.Text)
	}
}
