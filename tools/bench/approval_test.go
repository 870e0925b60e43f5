package main

import (
	"os/exec"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/skill"
)

// The approval skill loads and pauses first at a confirm step for a
// person: what the section measures.
func TestApprovalSkill(t *testing.T) {
	sk, err := skill.Load("bench_approval.yaml", []byte(approvalSkill()))
	if err != nil {
		t.Fatal(err)
	}
	if len(sk.Steps) != 2 || sk.Steps[0].Confirm == nil || sk.Steps[0].Confirm.Timeout == 0 {
		t.Fatalf("steps = %+v, want a confirm step with a deadline, then one more", sk.Steps)
	}
}

// memory reads a live process's RSS from /proc.
func TestUpProcessMemory(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	p := &upProcess{cmd: cmd}
	rss, peak, err := p.memory()
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || peak < rss {
		t.Errorf("rss %d, peak %d: want 0 < rss <= peak", rss, peak)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc shows it.
	stat := "4242 (heed (up) x) S 1 4242 4242 0 -1 4194560 12345 0 0 0 250 75 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want {
		t.Errorf("parseStatCPU = %s, want %s (utime 250 + stime 75 ticks)", got, want)
	}
	if _, err := parseStatCPU("4242 heed S 1"); err == nil {
		t.Error("a line without a command name in parentheses: no error")
	}
}
