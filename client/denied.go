package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
)

// A NATS server that refuses a publish (the identity's permissions leave
// the subject out) says so on the connection, not to the request: without
// this, a refused command would only time out. The client watches the
// connection's errors and fails the calls waiting on a refused subject at
// once, with code forbidden.

var publishDenied = regexp.MustCompile(`(?i)permissions violation for publish to "([^"]+)"`)

// denials are the calls waiting on each subject, to fail when the server
// refuses a publish to it.
type denials struct {
	mu      sync.Mutex
	waiting map[string]map[*context.CancelCauseFunc]struct{}
	// noConsumerDelete: this identity may not delete consumers (the
	// console's and the bridges' roles). Their ordered consumers are left
	// to expire once it was refused, so the server logs one violation per
	// client, not one per watch.
	noConsumerDelete atomic.Bool
}

// watch returns a context that is cancelled, with a forbidden error as its
// cause, if the server refuses a publish to subject before stop is called.
func (d *denials) watch(ctx context.Context, subject string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	d.mu.Lock()
	if d.waiting == nil {
		d.waiting = map[string]map[*context.CancelCauseFunc]struct{}{}
	}
	set := d.waiting[subject]
	if set == nil {
		set = map[*context.CancelCauseFunc]struct{}{}
		d.waiting[subject] = set
	}
	set[&cancel] = struct{}{}
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		delete(set, &cancel)
		if len(set) == 0 && d.waiting[subject] != nil && len(d.waiting[subject]) == 0 {
			delete(d.waiting, subject)
		}
		d.mu.Unlock()
		cancel(nil)
	}
}

// refused fails the calls waiting on the subject err names.
func (d *denials) refused(err error) {
	m := publishDenied.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	if strings.HasPrefix(m[1], "$JS.API.CONSUMER.DELETE.") {
		d.noConsumerDelete.Store(true)
	}
	denied := Forbidden(m[1])
	d.mu.Lock()
	for c := range d.waiting[m[1]] {
		(*c)(denied)
	}
	d.mu.Unlock()
}

// Forbidden is the error of a publish the NATS server refused to this
// connection's identity.
func Forbidden(subject string) error {
	return &events.Error{Code: events.CodeForbidden,
		Message: fmt.Sprintf("the NATS server refused this identity permission to publish to %s (its role does not allow it: docs/PRODUCTION.md)", subject),
		Err:     nats.ErrPermissionViolation}
}

// errorHandler is the connection's async error handler: permission
// violations fail the waiting calls; then next (the caller's) runs.
func (d *denials) errorHandler(next nats.ErrHandler) nats.ErrHandler {
	return func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			d.refused(err)
		}
		if next != nil {
			next(nc, sub, err)
		}
	}
}

// deniedCause is the forbidden error ctx was cancelled with, if any.
func deniedCause(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, events.ErrForbidden) {
		return cause
	}
	return nil
}
