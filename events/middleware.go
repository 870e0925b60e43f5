package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Middleware wraps a Handler with what every handler needs — recovery,
// in-process retries, poison classification — as watermill's middleware
// does, so handlers hold only their decisions.
type Middleware func(Handler) Handler

// Chain wraps h in the middleware, the first outermost.
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// Recover turns a panic in the handler into a poison error that carries
// the panic and its stack: the event is dead-lettered with the reason and
// the consumer goes on. Every consumer runs its handler inside Recover.
func Recover(log *slog.Logger) Middleware {
	return func(h Handler) Handler {
		return func(ctx context.Context, d *Delivery) (out []Event, err error) {
			defer func() {
				if r := recover(); r != nil {
					stack := debug.Stack()
					log.Error("handler panic", "subject", d.Subject, "seq", d.Seq, "panic", r, "stack", string(stack))
					err = Poison(fmt.Errorf("handler panic: %v\n%s", r, firstFrames(stack, 2048)))
				}
			}()
			return h(ctx, d)
		}
	}
}

// firstFrames keeps the start of a stack: enough to find the bug in a
// dead letter's reason, within the reason's bounds.
func firstFrames(stack []byte, limit int) string {
	if len(stack) > limit {
		return string(stack[:limit]) + "…"
	}
	return string(stack)
}

// Retry retries a failing handler in the process, with jittered
// exponential backoff from initial up to tries attempts in all, before the
// error goes back to the consumer (which redelivers later with its own
// backoff, then dead-letters): a blip of NATS or a tool costs
// milliseconds, not a redelivery. Poison errors and held deliveries are
// not retried.
func Retry(tries uint, initial time.Duration) Middleware {
	return func(h Handler) Handler {
		return func(ctx context.Context, d *Delivery) ([]Event, error) {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval, b.MaxInterval = initial, 32*initial
			return backoff.Retry(ctx, func() ([]Event, error) {
				out, err := h(ctx, d)
				if err != nil && (errors.Is(err, ErrPoison) || d.isHeld()) {
					return out, backoff.Permanent(err)
				}
				return out, err
			}, backoff.WithBackOff(b), backoff.WithMaxTries(tries), backoff.WithMaxElapsedTime(0))
		}
	}
}

// PoisonIf marks the errors for which is reports true as poison: retrying
// cannot fix them (data the contract refuses, a bug), so the event goes to
// the dead letters at once with the error as its reason.
func PoisonIf(is func(error) bool) Middleware {
	return func(h Handler) Handler {
		return func(ctx context.Context, d *Delivery) ([]Event, error) {
			out, err := h(ctx, d)
			if err != nil && !errors.Is(err, ErrPoison) && is(err) {
				return out, Poison(err)
			}
			return out, err
		}
	}
}

func (d *Delivery) isHeld() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held
}

// RetryStale runs a read-decide-write operation again while its write
// loses an optimistic-concurrency race (ErrStaleRead: someone appended to
// the aggregate since it was read), with a short jittered backoff, up to
// tries attempts in all (0: until ctx ends). Any other error ends it,
// other conflicts included (an answer to a closed question stays refused).
func RetryStale[T any](ctx context.Context, tries uint, op func() (T, error)) (T, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier = time.Millisecond, 50*time.Millisecond, 2
	return backoff.Retry(ctx, func() (T, error) {
		v, err := op()
		if err != nil && !errors.Is(err, ErrStaleRead) {
			return v, backoff.Permanent(err)
		}
		return v, err
	}, backoff.WithBackOff(&rereadAtOnce{next: b}), backoff.WithMaxTries(tries), backoff.WithMaxElapsedTime(0))
}

// rereadAtOnce retries the first lost race at once: what the winner
// wrote is already in the log to read. Only a race lost again backs off
// (with jitter), so that many racing writers spread out.
type rereadAtOnce struct {
	next  backoff.BackOff
	tried bool
}

func (r *rereadAtOnce) NextBackOff() time.Duration {
	if !r.tried {
		r.tried = true
		return 0
	}
	return r.next.NextBackOff()
}

func (r *rereadAtOnce) Reset() {
	r.tried = false
	r.next.Reset()
}
