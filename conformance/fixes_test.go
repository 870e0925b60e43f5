package conformance

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTeachFixes: any client teaches and revokes fixes with plain NATS
// requests (heed.cmd.fix.learn, heed.cmd.fix.forget). The healer refuses a
// fix it could never apply, with invalid_request and the reason, and an
// unknown fix id with not_found; nothing of a refused request is written.
func TestTeachFixes(t *testing.T) {
	h := startHeed(t)
	w := watch(t, h.js, "heed.fix.>")
	for _, c := range []struct {
		name string
		req  map[string]any
		code string
		want string
	}{
		{"unknown tool", map[string]any{"tool": "quay_chek", "match": "manifest unknown", "description": "d", "args_patch": map[string]any{"tag": "x"}},
			"invalid_request", `did you mean "quay_check"?`},
		{"unknown action tool", map[string]any{"tool": "quay_check", "match": "manifest unknown", "description": "d", "action": map[string]any{"tool": "nosuch"}},
			"invalid_request", `action tool "nosuch"`},
		{"broken template", map[string]any{"tool": "quay_check", "match": "manifest unknown", "description": "d", "args_patch": map[string]any{"tag": "{{ bogus("}},
			"invalid_request", "args_patch.tag"},
		{"no match", map[string]any{"tool": "quay_check", "description": "d", "args_patch": map[string]any{"tag": "x"}},
			"invalid_request", "match"},
		// Valid for the command, refused by the event it writes: still the
		// request's fault, with the command's code (it was schema_violation).
		{"blank match", map[string]any{"tool": "quay_check", "match": " ", "description": "d", "args_patch": map[string]any{"tag": "x"}},
			"invalid_request", "match"},
	} {
		err := request(h.nc, "heed.cmd.fix.learn", c.req, nil)
		var ce *cmdError
		if !errors.As(err, &ce) || ce.Code != c.code || ce.HeaderCode != c.code || !strings.Contains(ce.Message, c.want) {
			t.Errorf("%s: %v; want %s saying %q", c.name, err, c.code, c.want)
		} else if strings.HasPrefix(ce.Message, c.code) {
			t.Errorf("%s: the message repeats the code: %q", c.name, ce.Message)
		}
	}
	err := request(h.nc, "heed.cmd.fix.forget", map[string]any{"id": "fix-00000000000000000000", "by": "conformance"}, nil)
	var ce *cmdError
	if !errors.As(err, &ce) || ce.Code != "not_found" {
		t.Errorf("forget an unknown fix: %v; want not_found", err)
	}

	var learned struct {
		ID      string `json:"id"`
		EventID string `json:"event_id"`
	}
	mustRequest(t, h.nc, "heed.cmd.fix.learn", map[string]any{"tool": "quay_check", "match": "manifest unknown", "description": "use the full sha",
		"args_patch": map[string]any{"tag": `{{ args.tag + "0" }}`}, "by": "user:conformance"}, &learned)
	e := w.waitSubject(10*time.Second, "heed.fix."+learned.ID+".learned")
	if got := w.find(func(e event) bool { return strings.HasSuffix(e.Subject, ".learned") }); len(got) != 1 {
		t.Errorf("%d heed.fix.*.learned in the log, want only the valid one:\n%s", len(got), w.dump())
	}
	var d struct {
		Source string `json:"source"`
		By     string `json:"by"`
	}
	e.decode(t, &d)
	if d.Source != "person" || d.By != "user:conformance" {
		t.Errorf("heed.fix.learned = %+v", d)
	}
	// A fix is forgotten as soon as it is taught (the log says so, not the
	// projection, which may be behind: forget answered not_found), once:
	// two forgets at once write one forgotten event.
	if err := request(h.nc, "heed.cmd.fix.forget", map[string]any{"id": learned.ID, "by": "user:conformance"}, nil); err != nil {
		t.Fatalf("forget right after learn: %v", err)
	}
	w.waitSubject(10*time.Second, "heed.fix."+learned.ID+".forgotten")
	if err := request(h.nc, "heed.cmd.fix.forget", map[string]any{"id": learned.ID, "by": "user:again"}, nil); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("a second forget: %v, want not_found", err)
	}
	mustRequest(t, h.nc, "heed.cmd.fix.learn", map[string]any{"tool": "quay_check", "match": "manifest unknown", "description": "use the full sha",
		"args_patch": map[string]any{"tag": `{{ args.tag + "0" }}`}, "by": "user:conformance"}, &learned)
	errs := make(chan error, 2)
	for _, by := range []string{"user:a", "user:b"} {
		go func() { errs <- request(h.nc, "heed.cmd.fix.forget", map[string]any{"id": learned.ID, "by": by}, nil) }()
	}
	ok := 0
	for range 2 {
		if <-errs == nil {
			ok++
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(streamMsgs(t, h.js, "heed.fix."+learned.ID+".forgotten")); ok != 1 || n != 2 {
		t.Fatalf("two forgets at once: %d succeeded, %d forgotten events in all (want 1 and 2: the first fix's, and one of these)", ok, n)
	}
}
