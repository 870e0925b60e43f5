package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/heedhq/heed/events"
)

// whoami names the person at the terminal: $HEED_IDENTITY as it is (the
// identity approver tiers name), else user:<login> ($HEED_USER, $USER,
// $LOGNAME, else the account the process runs as).
func whoami() string {
	if v := os.Getenv("HEED_IDENTITY"); v != "" {
		return v
	}
	for _, k := range []string{"HEED_USER", "USER", "LOGNAME"} {
		if v := os.Getenv(k); v != "" {
			return "user:" + v
		}
	}
	// Containers, systemd units and cron set none of them: the account
	// the process runs as is still someone (the audit says who).
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "user:" + u.Username
	}
	return "user:uid-" + strconv.Itoa(os.Getuid())
}

// parseKV turns k=v flags into a map; values stay strings unless --json
// values are asked for (the service coerces them by declared type).
func parseKV(pairs []string, jsonValues bool) (map[string]any, error) {
	out := map[string]any{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, events.Errorf(events.CodeInvalidRequest, "%q: use key=value", p)
		}
		if jsonValues {
			var x any
			if err := json.Unmarshal([]byte(v), &x); err == nil {
				out[k] = x
				continue
			}
		}
		out[k] = v
	}
	return out, nil
}

func printJSON(w writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintln(w, string(b))
}
