package main

import (
	"strings"
	"testing"
)

func TestCheckFilter(t *testing.T) {
	for _, f := range []string{"heed.run.*.step.failed", "heed.>", ">", "heed.dlq.>", "*.run.x.started", "heed.fix.*.learned"} {
		if err := checkFilter(f); err != nil {
			t.Errorf("checkFilter(%q) = %v, want ok", f, err)
		}
	}
	for f, want := range map[string]string{
		"foo.bar":        "matches none of heed's subjects",
		"heed..x":        "empty token",
		"heed.>.x":       "must be the last token",
		"heed.run.a*":    "whole tokens",
		"heed.run":       "matches none",
		"heed.cmd.run.>": "matches none",
	} {
		err := checkFilter(f)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "invalid_request: ") {
			t.Errorf("checkFilter(%q) = %v, want invalid_request containing %q", f, err, want)
		}
	}
}

func TestOneOf(t *testing.T) {
	if err := oneOf("--status", "failed", runStatuses); err != nil {
		t.Fatal(err)
	}
	err := oneOf("--status", "faild", runStatuses)
	if err == nil || !strings.Contains(err.Error(), `--status "faild": use one of requested, running, paused, completed, failed, cancelled, abandoned (did you mean "failed"?)`) {
		t.Errorf("err = %v", err)
	}
}
