package heedmcp_test

// heed's MCP server driven by the MCP Go SDK's own client, over its
// in-memory transport, against heed's services on a real server.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/tools/internal/heedtest"
	heedmcp "github.com/heedhq/heed/tools/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const sha = "0123456789abcdef0123456789abcdef01234567"

const checkTagSkill = `name: check_tag
description: Check that an image tag exists
inputs:
  tag: {type: string}
steps:
  - name: check
    tool: quay_check
    args: {tag: "{{ inputs.tag }}"}
    output: image
`

type rig struct {
	t       *testing.T
	c       *heedclient.Client
	session *mcp.ClientSession
	updated chan string
}

func startRig(t *testing.T) *rig {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	skills := t.TempDir()
	for _, f := range []string{"release_prod.yaml", "groom_task.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "skills", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(skills, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(skills, "check_tag.yaml"), []byte(checkTagSkill), 0o644); err != nil {
		t.Fatal(err)
	}
	c := heedtest.Start(t, root, "heed/mcp-test")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := heedmcp.New(c, heedmcp.Config{Identity: "agent:claude", SkillsDir: skills, Log: eventstest.Logger(t)})
	t.Cleanup(srv.Close)
	st, ct := mcp.NewInMemoryTransports()
	go func() { _ = srv.MCP().Run(ctx, st) }()
	r := &rig{t: t, c: c, updated: make(chan string, 64)}
	client := mcp.NewClient(&mcp.Implementation{Name: "heed-test", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case r.updated <- req.Params.URI:
			default:
			}
		},
	})
	if r.session, err = client.Connect(ctx, ct, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.session.Close() })
	return r
}

// call calls a tool and decodes its structured result; isErr says whether
// it was a tool error, text is its text.
func (r *rig) call(name string, args map[string]any, out any) (isErr bool, text string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := r.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		r.t.Fatalf("%s: protocol error: %v", name, err)
	}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if out != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			r.t.Fatalf("%s: result %s: %v", name, b, err)
		}
	}
	return res.IsError, text
}

func (r *rig) must(name string, args map[string]any, out any) {
	r.t.Helper()
	if isErr, text := r.call(name, args, out); isErr {
		r.t.Fatalf("%s: tool error: %s", name, text)
	}
}

func (r *rig) refused(name string, args map[string]any, want string) {
	r.t.Helper()
	isErr, text := r.call(name, args, nil)
	if !isErr || !strings.Contains(text, want) {
		r.t.Errorf("%s %v: error %v %q, want an error saying %q", name, args, isErr, text, want)
	}
}

// TestSkillsThroughMCP: list the skills, run one that pauses (a result,
// with the question, its options, its default and what to call next),
// continue it to completion; run one whose step fails with an unknown
// error (handed to the agent with the error and the healer's context),
// retry it with corrected args, and heed learns the fix.
func TestSkillsThroughMCP(t *testing.T) {
	r := startRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tools, err := r.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = true
		if tl.Description == "" || tl.InputSchema == nil {
			t.Errorf("tool %s has no description or input schema", tl.Name)
		}
	}
	for _, want := range []string{"skill_list", "skill_run", "skill_status", "skill_continue", "skill_retry_step", "skill_cancel", "confirmation_request",
		"confirmation_answer", "escalation_request", "escalation_status", "escalation_outcome", "session_can_continue", "change_set_propose", "decision_history", "check_known_issues", "learn_tool_fix", "stats"} {
		if !names[want] {
			t.Errorf("no tool %s", want)
		}
	}

	var list heedmcp.SkillListOut
	r.must("skill_list", nil, &list)
	if len(list.Skills) != 3 || list.Skills[0].Name != "check_tag" || list.Skills[2].Name != "release_prod" || len(list.Skills[2].Inputs) == 0 {
		t.Fatalf("skill_list: %+v", list)
	}

	var run heedmcp.RunResult
	r.must("skill_run", map[string]any{"skill": "release_prod", "inputs": map[string]any{"commit_sha": sha}, "wait_s": 20}, &run)
	if run.Status != "paused" || run.Awaiting == nil || run.Awaiting.Kind != "confirmation" || run.Awaiting.Default != "cancel" || len(run.Awaiting.Options) != 2 ||
		!strings.Contains(run.Awaiting.Message, "Ready to release 01234567") || run.Awaiting.Deadline.IsZero() || run.Awaiting.RecentSteps == nil || !strings.Contains(run.Next, "skill_continue") {
		t.Fatalf("a paused run: %+v (awaiting %+v)", run, run.Awaiting)
	}
	r.refused("skill_continue", map[string]any{"run_id": run.RunID, "choice": "maybe"}, "maybe")
	var done heedmcp.RunResult
	r.must("skill_continue", map[string]any{"run_id": run.RunID, "choice": "proceed", "reason": "the release notes are reviewed", "wait_s": 20}, &done)
	if done.Status != "completed" || done.Outputs == nil {
		t.Fatalf("after skill_continue: %+v", done)
	}
	st, err := r.c.Confirmation(ctx, run.Awaiting.ConfirmID)
	if err != nil || st.Answer == nil || st.Answer.By != "agent:claude" || st.Answer.Method != "agent" {
		t.Fatalf("the answer: %v %+v", err, st)
	}

	// Without wait_s, the run as it stands once the runner took the
	// answer up: not still paused at the question just answered, with a
	// "next" that asks to answer it again.
	var second heedmcp.RunResult
	r.must("skill_run", map[string]any{"skill": "release_prod", "inputs": map[string]any{"commit_sha": sha}, "wait_s": 20}, &second)
	if second.Status != "paused" || second.Awaiting == nil {
		t.Fatalf("a second paused run: %+v", second)
	}
	var moved heedmcp.RunResult
	r.must("skill_continue", map[string]any{"run_id": second.RunID, "choice": "cancel"}, &moved)
	if moved.Status == "paused" && moved.Awaiting != nil && moved.Awaiting.ConfirmID == second.Awaiting.ConfirmID {
		t.Fatalf("skill_continue without wait_s describes the run before the answer: %+v (next %q)", moved, moved.Next)
	}

	// A failure handed to the agent, retried with corrected args.
	var failed heedmcp.RunResult
	r.must("skill_run", map[string]any{"skill": "check_tag", "inputs": map[string]any{"tag": "0123456"}, "wait_s": 30}, &failed)
	if failed.Status != "paused" || failed.Awaiting == nil || failed.Awaiting.Kind != "agent" || failed.Failure == nil ||
		!strings.Contains(failed.Failure.Error.Message, "manifest unknown") || failed.Failure.Tool != "quay_check" || !strings.Contains(failed.Next, "skill_retry_step") {
		t.Fatalf("a failed step: %+v (failure %+v)", failed, failed.Failure)
	}
	var retried heedmcp.RunResult
	r.must("skill_retry_step", map[string]any{"run_id": failed.RunID, "args": map[string]any{"tag": sha}, "reason": "the registry tags images by the full sha", "wait_s": 30}, &retried)
	if retried.Status != "completed" {
		t.Fatalf("after skill_retry_step: %+v", retried)
	}
	var issues heedmcp.KnownIssuesOut
	eventstest.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		r.must("check_known_issues", map[string]any{"tool": "quay_check"}, &issues)
		if len(issues.Issues) == 0 {
			return errorf("no known issue learned yet: %+v", issues)
		}
		return nil
	})
	fixes, err := r.c.Fixes(ctx)
	if err != nil || len(fixes) != 1 || fixes[0].Source != "agent" || fixes[0].Tool != "quay_check" {
		t.Fatalf("the learned fix: %v %+v", err, fixes)
	}

	// Bad input: a tool error with a clear message, never a crash.
	r.refused("skill_status", map[string]any{"run_id": "r-no-such-run"}, "not_found")
	r.refused("skill_status", map[string]any{"run_id": "not a run id!"}, "not a run id")
	r.refused("skill_run", map[string]any{"skill": "no_such_skill"}, "skill_list lists them")
	r.refused("skill_run", map[string]any{"skill": "release_prod", "inputs": map[string]any{"nope": 1}}, "invalid_request")
	r.refused("skill_cancel", map[string]any{"run_id": done.RunID}, "conflict")
	if isErr, _ := r.call("skill_retry_step", map[string]any{"run_id": failed.RunID, "args": "not an object"}, nil); !isErr {
		t.Errorf("skill_retry_step with args that are not an object was accepted")
	}

	// A paused run cancelled.
	var another, cancelled heedmcp.RunResult
	r.must("skill_run", map[string]any{"skill": "release_prod", "inputs": map[string]any{"commit_sha": sha}, "wait_s": 20}, &another)
	// A subscriber to the run is told of the cancel once a read shows it.
	runURI := "heed://run/" + another.RunID
	if err := r.session.Subscribe(ctx, &mcp.SubscribeParams{URI: runURI}); err != nil {
		t.Fatal(err)
	}
	for len(r.updated) > 0 {
		<-r.updated // earlier changes of other resources
	}
	r.must("skill_cancel", map[string]any{"run_id": another.RunID, "reason": "not today"}, &cancelled)
	if cancelled.Status != "cancelled" {
		t.Errorf("skill_cancel: %+v", cancelled)
	}
	for told := false; !told; {
		select {
		case uri := <-r.updated:
			told = uri == runURI
		case <-time.After(10 * time.Second):
			t.Fatalf("no resource-updated notification for %s", runURI)
		}
	}
	if res, err := r.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: runURI}); err != nil || len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, `"heed.run.cancelled"`) {
		t.Errorf("%s read when told of the change lacks the cancel: %v %+v", runURI, err, res)
	}
	var status heedmcp.RunResult
	r.must("skill_status", map[string]any{"run_id": another.RunID}, &status)
	if status.Status != "cancelled" || !strings.Contains(status.Next, "over") {
		t.Errorf("skill_status: %+v", status)
	}

	// The run as a resource, with its timeline.
	res, err := r.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "heed://run/" + done.RunID})
	if err != nil || len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, `"heed.run.completed"`) {
		t.Fatalf("heed://run/%s: %v %+v", done.RunID, err, res)
	}
}

func errorf(format string, args ...any) error {
	return &strErr{s: strings.TrimSpace(sprintf(format, args...))}
}

type strErr struct{ s string }

func (e *strErr) Error() string { return e.s }

func sprintf(format string, args ...any) string {
	b, _ := json.Marshal(args)
	return format + " " + string(b)
}

// TestPeopleAndChangesThroughMCP: ask a person, answer where allowed, ask
// for permission and whether the session may go on, propose a change set
// and read the decisions, teach a fix, read the statistics; the pending
// confirmations resource tells a subscriber when it changes.
func TestPeopleAndChangesThroughMCP(t *testing.T) {
	r := startRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.session.Subscribe(ctx, &mcp.SubscribeParams{URI: "heed://confirmations"}); err != nil {
		t.Fatal(err)
	}
	var asked heedmcp.ConfirmRequestOut
	r.must("confirmation_request", map[string]any{"message": "May I restart the cache?", "timeout_s": 600}, &asked)
	if asked.ID == "" || asked.Answered {
		t.Fatalf("confirmation_request: %+v", asked)
	}
	select {
	case uri := <-r.updated:
		if uri != "heed://confirmations" {
			t.Errorf("updated %s", uri)
		}
	case <-time.After(10 * time.Second):
		t.Error("no resource-updated notification for heed://confirmations")
	}
	// Told once a read shows it: the list comes from the index, a
	// projection behind the log.
	if res, err := r.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "heed://confirmations"}); err != nil || len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, asked.ID) {
		t.Errorf("heed://confirmations read when told of the change lacks %s: %v", asked.ID, err)
	}
	var ans struct {
		By      string `json:"by"`
		Channel string `json:"channel"`
		Choice  string `json:"choice"`
	}
	r.must("confirmation_answer", map[string]any{"id": asked.ID, "choice": "proceed"}, &ans)
	if ans.By != "agent:claude" || ans.Channel != "mcp" {
		t.Errorf("confirmation_answer: %+v", ans)
	}
	r.refused("confirmation_answer", map[string]any{"id": asked.ID, "choice": "cancel"}, "already answered")
	// Asked and waited for: a person answers meanwhile.
	// (The index lags the log: it polls until the question is listed.)
	answeredElsewhere := make(chan error, 1)
	go func() {
		answeredElsewhere <- func() error {
			for ctx.Err() == nil {
				index, err := r.c.Index(ctx, "confirm")
				if err != nil {
					return err
				}
				for _, e := range index {
					if e.Status != "pending" {
						continue
					}
					if st, err := r.c.Confirmation(ctx, e.ID); err != nil || st.Request == nil || st.Request.Message != "Shall I page the on-call?" {
						continue // another question (the index lags the log)
					}
					_, err := r.c.Answer(ctx, command.AnswerConfirmation{ID: e.ID, Choice: "cancel", By: "user:alice", Channel: "web", Reason: "not now"})
					return err
				}
				time.Sleep(50 * time.Millisecond)
			}
			return ctx.Err()
		}()
	}()
	var waited heedmcp.ConfirmRequestOut
	r.must("confirmation_request", map[string]any{"message": "Shall I page the on-call?", "wait_s": 15}, &waited)
	if err := <-answeredElsewhere; err != nil {
		t.Errorf("alice's answer: %v", err)
	}
	if !waited.Answered || waited.Choice != "cancel" || waited.By != "user:alice" || waited.Reason != "not now" {
		t.Errorf("confirmation_request with wait_s: %+v", waited)
	}
	var only heedmcp.ConfirmRequestOut
	r.must("confirmation_request", map[string]any{"message": "Only Alice may say", "approvers": []string{"user:alice"}}, &only)
	r.refused("confirmation_answer", map[string]any{"id": only.ID, "choice": "proceed"}, "may not answer")

	var esc struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	r.must("escalation_request", map[string]any{"operation": "force_push", "scope": "main", "risk": 0.95}, &esc)
	if esc.ID == "" || esc.Status == "" {
		t.Fatalf("escalation_request: %+v", esc)
	}
	var held struct {
		CanContinue bool   `json:"can_continue"`
		Reason      string `json:"reason"`
	}
	r.must("session_can_continue", nil, &held)
	if esc.Status == "held" && held.CanContinue {
		t.Errorf("a critical request is held and the session may continue: %+v", held)
	}
	r.refused("escalation_request", map[string]any{"operation": "deploy", "risk": 7}, "")
	// Followed up: its status (still held after a short wait), a retry
	// under the agent's own id is the same escalation, and an approved
	// one takes its outcome.
	var st struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	r.must("escalation_status", map[string]any{"id": esc.ID, "wait_s": 0.3}, &st)
	if st.ID != esc.ID || st.Status != esc.Status {
		t.Errorf("escalation_status: %+v, want %s %s", st, esc.ID, esc.Status)
	}
	var first, again struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	low := map[string]any{"id": "mcp-esc-1", "operation": "test_run", "scope": "unit", "risk": 0.1, "confidence": 0.9}
	r.must("escalation_request", low, &first)
	r.must("escalation_request", low, &again)
	if first.ID != "mcp-esc-1" || again.ID != first.ID || first.Status != "approved" {
		t.Errorf("a retried request: %+v then %+v, want mcp-esc-1 approved twice", first, again)
	}
	var outcome map[string]any
	r.must("escalation_outcome", map[string]any{"id": "mcp-esc-1", "outcome": "success"}, &outcome)
	r.refused("escalation_outcome", map[string]any{"id": "mcp-esc-1", "outcome": "success"}, "")

	var prop struct {
		Sets []struct {
			ID string `json:"id"`
		} `json:"sets"`
		Queued int `json:"queued"`
	}
	r.must("change_set_propose", map[string]any{"subject": "task-9", "calls": []map[string]any{{"tool": "set_task_title", "args": map[string]any{"task": "task-9", "title": "Better"}}}}, &prop)
	if prop.Queued != 1 {
		t.Fatalf("change_set_propose: %+v", prop)
	}
	r.refused("change_set_propose", map[string]any{"subject": "task-9", "calls": []map[string]any{{"tool": "read_task", "args": map[string]any{"task": "x"}}}}, "immediate tool")
	if _, err := r.c.DecideChanges(ctx, decide(prop.Sets[0].ID)); err != nil {
		t.Fatal(err)
	}
	eventstest.CheckFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		_, text := r.call("decision_history", map[string]any{"subject": "task-9"}, nil)
		if !strings.Contains(text, `✗ set_task_title(task="task-9", title="Better") — rejected (reason: "keep it")`) {
			return errorf("history: %s", text)
		}
		return nil
	})

	var fix struct {
		ID string `json:"id"`
	}
	r.must("learn_tool_fix", map[string]any{"tool": "quay_check", "match": "manifest unknown", "description": "use the full sha", "args_patch": map[string]any{"tag": "{{ args.tag }}"}}, &fix)
	if fix.ID == "" {
		t.Fatal("learn_tool_fix: no id")
	}
	r.refused("learn_tool_fix", map[string]any{"tool": "no_such_tool", "match": "x", "description": "d"}, "invalid_request")
	var stats heedmcp.StatsOut
	r.must("stats", nil, &stats)
}

func decide(id string) command.DecideChangeSet {
	return command.DecideChangeSet{ID: id, Items: []int{1}, Verdict: "rejected", Reason: "keep it", By: "user:alice", Channel: "web"}
}
