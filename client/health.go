package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go"
)

// Services are heed's services, as `heed up` runs them.
var Services = []string{"indexer", "runner", "confirm-router", "learner", "healer", "escalator", "changesets"}

// ServiceHealth is one service's answer to its health check.
type ServiceHealth struct {
	Name string `json:"name"`
	// Status is ok, degraded, or missing (no answer).
	Status string          `json:"status"`
	Health *service.Health `json:"health,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// StatusMissing is the status of a service that did not answer.
const StatusMissing = "missing"

// Health asks each named service (default: Services) for its health on
// heed.svc.<name>.health, all at once, waiting up to timeout for each.
// With several instances of a service, the first to answer speaks for it.
func (c *Client) Health(ctx context.Context, timeout time.Duration, names ...string) []ServiceHealth {
	if len(names) == 0 {
		names = Services
	}
	out := make([]ServiceHealth, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.health(ctx, name, timeout)
		}()
	}
	wg.Wait()
	return out
}

func (c *Client) health(ctx context.Context, name string, timeout time.Duration) ServiceHealth {
	sh := ServiceHealth{Name: name, Status: StatusMissing}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := c.nc.RequestWithContext(rctx, service.HealthSubject(name), nil)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			sh.Error = "not running (no one answers " + service.HealthSubject(name) + ")"
		} else {
			sh.Error = fmt.Sprintf("no answer on %s: %v", service.HealthSubject(name), err)
		}
		return sh
	}
	var h service.Health
	if err := json.Unmarshal(m.Data, &h); err != nil {
		sh.Error = fmt.Sprintf("bad health answer: %v", err)
		return sh
	}
	sh.Health, sh.Status = &h, h.Status
	return sh
}
