package events

import "testing"

func TestCoveringFilter(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
		ok   bool
	}{
		{[]string{"heed.run.>"}, "heed.run.>", true},
		{[]string{"heed.run.>", "heed.confirm.*.answered"}, "heed.>", true},
		{[]string{"heed.run.*.step.failed", "heed.run.*.step.completed"}, "heed.run.*.step.>", true},
		{EventSubjects(), "heed.>", true},
		{[]string{"a.b", "a.b.>"}, "a.>", true},
		{[]string{"a.b", "a.b"}, "a.>", true},
		{[]string{"a.>", "b.>"}, "", false},
	} {
		got, ok := coveringFilter(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("coveringFilter(%v) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok {
			for _, f := range tc.in {
				// The cover matches every subject a filter matches (probe
				// with the filter's own tokens as a subject).
				if !subjectMatches(got, f) {
					t.Errorf("cover %q does not cover %q", got, f)
				}
			}
		}
	}
}

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
	} {
		if got := subjectMatches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
		}
	}
}
