package confirm

import "testing"

// TestAnswerEventIDKeepsPeopleApart: two people's request ids never name
// one answer event, however their by and request id split.
func TestAnswerEventIDKeepsPeopleApart(t *testing.T) {
	if a, b := answerEventID("c", "user:alice", "x"), answerEventID("c", "user", "alice:x"); a == b {
		t.Fatalf("user:alice's x and user's alice:x share the answer id %s", a)
	}
	if a, b := answerEventID("c", "user:alice", "x"), answerEventID("c", "user:alice", "x"); a != b {
		t.Fatalf("the same request: %s and %s", a, b)
	}
}
