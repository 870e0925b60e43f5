package events

import "testing"

func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
		{"heed.run.>", "heed.run.r1.started", true},
		{"heed.run.>", "heed.run", false},
		{"heed.run.>", "heed.confirm.c1.answered", false},
		{"heed.confirm.*.answered", "heed.confirm.c1.answered", true},
		{"heed.confirm.*.answered", "heed.confirm.c1.requested", false},
		{"heed.confirm.*.answered", "heed.confirm.c1.answered.x", false},
		{"heed.confirm.*.answered", "heed.confirm.answered", false},
		{"heed.schedule.>", "heed.schedule.confirm.c1", true},
		{"heed.run.*.step.failed", "heed.schedule.confirm.c1", false},
		{"a", "a", true},
		{"a", "a.b", false},
		{"a.b", "a", false},
		{">", "a.b", true},
		// A filter as the subject: does the first filter cover it?
		{"heed.>", "heed.run.*.step.failed", true},
		{"heed.run.>", "heed.confirm.*.answered", false},
		{"heed.run.*.step.>", "heed.run.*.step.failed", true},
		{"heed.run.r1.>", "heed.run.*.step.failed", false},
	} {
		if got := subjectMatches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
		}
	}
}
