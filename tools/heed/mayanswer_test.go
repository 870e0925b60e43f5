package main

import (
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/confirmation"
)

// heed confirm with no id skips confirmations whose approvers leave the
// person at the terminal out (it used to offer the oldest one anyway, and
// the answer was refused not_allowed).
func TestConfirmOffersWhatThePersonMayAnswer(t *testing.T) {
	open := &confirmation.State{Request: &events.ConfirmRequestedData{Message: "m"}}
	named := &confirmation.State{Request: &events.ConfirmRequestedData{Message: "m", Approvers: []string{"user:bob", "user:carol"}}}
	for _, c := range []struct {
		st   *confirmation.State
		who  string
		want bool
	}{
		{open, "user:alice", true},
		{named, "user:alice", false},
		{named, "user:carol", true},
		{&confirmation.State{}, "user:alice", true}, // the request not read yet: offered, judged on answer
	} {
		if got := mayAnswer(c.st, c.who); got != c.want {
			t.Errorf("mayAnswer(%v, %s) = %v, want %v", c.st.Request, c.who, got, c.want)
		}
	}
}
