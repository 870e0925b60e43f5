package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// request sends a command to a service and decodes its reply; a service
// error comes back as an *events.Error with the service's code.
func (c *client) request(ctx context.Context, subject string, req, reply any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	msg, err := c.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if err == nats.ErrNoResponders {
			return events.Errorf(events.CodeUnavailable, "no service answers %s (is `heed up` running with every service?)", subject)
		}
		return events.Errorf(events.CodeUnavailable, "%s: %v", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		text := string(msg.Data)
		if text == "" {
			text = msg.Header.Get(micro.ErrorHeader)
		}
		return &events.Error{Code: events.Code(code), Message: text}
	}
	if reply != nil {
		return json.Unmarshal(msg.Data, reply)
	}
	return nil
}

// whoami names the person at the terminal.
func whoami() string {
	for _, k := range []string{"HEED_USER", "USER", "LOGNAME"} {
		if v := os.Getenv(k); v != "" {
			return "user:" + v
		}
	}
	return "user:unknown"
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
