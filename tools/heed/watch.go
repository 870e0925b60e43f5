package main

import (
	"context"
	"time"
)

// keepWatching runs watch in the background, again a second after each
// time it returns (a watch lost while NATS was gone a while), until it
// says it is done or ctx ends. stop ends it and waits for it.
func keepWatching(ctx context.Context, watch func(ctx context.Context) (done bool)) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for wctx.Err() == nil {
			if watch(wctx) {
				return
			}
			select {
			case <-wctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return func() { cancel(); <-finished }
}
