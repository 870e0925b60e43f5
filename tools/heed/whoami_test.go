package main

import (
	"os"
	"os/user"
	"strconv"
	"testing"
)

// Where no login variable is set (a container, a systemd unit, cron), the
// identity is still the account's, not user:unknown.
func TestWhoamiWithoutLoginVariables(t *testing.T) {
	for _, k := range []string{"HEED_IDENTITY", "HEED_USER", "USER", "LOGNAME"} {
		t.Setenv(k, "")
	}
	want := "user:uid-" + strconv.Itoa(os.Getuid()) // no account name known
	if u, err := user.Current(); err == nil && u.Username != "" {
		want = "user:" + u.Username
	}
	if got := whoami(); got != want {
		t.Errorf("whoami() = %q, want %q", got, want)
	}
	t.Setenv("LOGNAME", "alice")
	if got := whoami(); got != "user:alice" {
		t.Errorf("whoami() with LOGNAME=alice = %q", got)
	}
}
