// Package servicetest starts heed services in tests (apart from
// eventstest, which the contract's own tests import without the service
// runtime's dependencies).
package servicetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/service"
)

// Start runs a service's entry point against env on a connection
// of its own, as heed up does, and stops it when the test ends (or when
// the returned stop is called): it must return within 20 s, with nil or
// context.Canceled. It returns once the service has set up
// (service.Runtime.SetUp, which heed up waits for too), so that a test's
// first request does not race the service's start.
func Start(t testing.TB, env *eventstest.Env, name string, run service.RunFunc) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rt, err := service.Connect(ctx, name, env.URL(), eventstest.Logger(t), events.DefaultTopology())
	if err != nil {
		cancel()
		t.Fatalf("connect %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, rt) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("%s stopped with error: %v", name, err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("%s did not stop within 20s", name)
			}
			rt.Close()
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(20 * time.Second)
	for !rt.SetUp() {
		select {
		case err := <-done:
			done <- err // for stop
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("%s stopped while starting: %v", name, err)
			}
			return stop
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not set up within 20s", name)
		}
	}
	return stop
}
