package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A list longer than --limit ends with the --after of the next page, and
// the pages together list every set once.
func TestChangesListPagesWithAfter(t *testing.T) {
	t.Parallel()
	h := startHeedWithTools(t)
	dir := t.TempDir()
	cli := func(args ...string) string { t.Helper(); return cliOK(t, h.url, args...) }
	const n = 5
	for i := range n {
		calls := filepath.Join(dir, fmt.Sprintf("calls-%d.json", i))
		if err := os.WriteFile(calls, []byte(fmt.Sprintf(`[{"tool":"set_task_title","args":{"task":"page-%d","title":"t%d"}}]`, i, i)), 0o644); err != nil {
			t.Fatal(err)
		}
		cli("changes", "propose", "--agent", "agent:pager", "--subject", fmt.Sprintf("page-%d", i), "--calls", calls)
	}
	next := regexp.MustCompile(`\((\d+) more: --limit, or the next page: --after (\S+)\)`)
	seen := map[string]int{}
	args := []string{"changes", "list", "--agent", "agent:pager", "--limit", "2"}
	for page := 1; ; page++ {
		if page > n {
			t.Fatalf("more than %d pages", n)
		}
		var out string
		checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
			out = cli(args...)
			if page == 1 && !strings.Contains(out, "3 more") {
				return fmt.Errorf("the first page of 5 sets by 2:\n%s", out)
			}
			return nil
		})
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "cs-") {
				seen[f[0]]++
			}
		}
		m := next.FindStringSubmatch(out)
		if m == nil {
			if strings.Contains(out, "more") {
				t.Fatalf("page %d says more without the next page:\n%s", page, out)
			}
			break
		}
		args = []string{"changes", "list", "--agent", "agent:pager", "--limit", "2", "--after", m[2]}
	}
	if len(seen) != n {
		t.Errorf("%d sets over the pages, want %d: %v", len(seen), n, seen)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s listed %d times", id, k)
		}
	}
}

// heed audit of a change set says how the set stands (its own fold: the
// index knows only that it exists).
func TestAuditOfAChangeSetSaysItsStatus(t *testing.T) {
	t.Parallel()
	h := startHeedWithTools(t)
	calls := filepath.Join(t.TempDir(), "calls.json")
	if err := os.WriteFile(calls, []byte(`[{"tool":"set_task_title","args":{"task":"audit-1","title":"T"}}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string { t.Helper(); return cliOK(t, h.url, args...) }
	out := cli("changes", "propose", "--agent", "agent:auditor", "--subject", "audit-1", "--calls", calls, "--json")
	id := regexp.MustCompile(`cs-[a-z0-9-]+`).FindString(out)
	if id == "" {
		t.Fatalf("no set id in %s", out)
	}
	cli("changes", "reject", id, "1", "--reason", "not now", "--as", "user:alice")
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		out := cli("audit", id)
		if !strings.Contains(out, "changeset "+id+": resolved, ") || !strings.Contains(out, "1 item ") {
			return fmt.Errorf("audit:\n%s", out)
		}
		return nil
	})
}

// cliOK runs heed against url and fails the test unless it exits 0.
func cliOK(t *testing.T, url string, args ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, append([]string{"--nats-url", url}, args...)...)
	if code != 0 {
		t.Fatalf("heed %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}
