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
	// Active is the instance holding the service's lease, and Standbys
	// the instances waiting for it (service mains run as separate
	// processes; a service heed up runs has neither).
	Active   *service.LeaseHolder  `json:"active,omitempty"`
	Standbys []service.LeaseHolder `json:"standbys,omitempty"`
}

// standbyWait is how long Health gathers the stand-bys' answers.
const standbyWait = 250 * time.Millisecond

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

// health asks one service, and meanwhile who holds its lease and who
// stands by.
func (c *Client) health(ctx context.Context, name string, timeout time.Duration) ServiceHealth {
	var active *service.LeaseHolder
	var standbys []service.LeaseHolder
	done := make(chan struct{})
	go func() {
		defer close(done)
		standbys = c.standbys(name, min(timeout, standbyWait))
		lctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if h, ok := service.ReadLease(lctx, c.bus.JetStream(), name); ok {
			active = &h
		}
	}()
	sh := c.healthCheck(ctx, name, timeout)
	<-done
	sh.Active, sh.Standbys = active, standbys
	return sh
}

func (c *Client) healthCheck(ctx context.Context, name string, timeout time.Duration) ServiceHealth {
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

// standbys gathers the answers of a service's stand-bys for wait.
func (c *Client) standbys(name string, wait time.Duration) []service.LeaseHolder {
	inbox := c.nc.NewRespInbox()
	// A channel of our own: a synchronous subscription's is 64k slots
	// (512 KB) per call, for a handful of stand-bys.
	replies := make(chan *nats.Msg, 64)
	sub, err := c.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishRequest(service.StandbySubject(name), inbox, nil); err != nil {
		return nil
	}
	var out []service.LeaseHolder
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		select {
		case m := <-replies:
			var h service.LeaseHolder
			if json.Unmarshal(m.Data, &h) == nil {
				out = append(out, h)
			}
		case <-timeout.C:
			return out
		}
	}
}
