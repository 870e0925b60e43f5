package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every heed service runs as one active instance: its consumers keep
// state in memory that is right only if one process sees all of the
// service's events in order (the confirm router's gates, the projections'
// sequence checks). A second instance of a service main stands by: it
// waits for the lease of the service, a key in LeaseBucket that the
// active instance refreshes and that expires by itself (a per-key TTL the
// server applies) when the active instance stops refreshing it. A clean
// stop releases it, so a stand-by takes over at once; after a kill -9 it
// takes over once the TTL has passed. An instance that finds its lease
// gone (it was paused past the TTL, or cut off from the cluster) exits 1
// at once, without draining, as a crash would (the stand-by may be
// running its work already; everything is in the log), so that its
// supervisor starts it again, standing by. docs/PRODUCTION.md.

// LeaseBucket holds one key per service: who is active.
const LeaseBucket = "heed_leases"

// DefaultLeaseTTL is how long a lease outlives its last refresh; the
// active instance refreshes it every fifth of that. Longer than a
// JetStream leader election under load (a node killed: a few seconds
// without answers from the lease's stream), so that an active instance
// does not give up for that; a stand-by on another host takes over this
// long after a kill -9.
const DefaultLeaseTTL = 15 * time.Second

// StandbySubject is where every stand-by of a service answers, with its
// LeaseHolder, who it is: one request gathers them all.
func StandbySubject(service string) string { return "heed.svc." + service + ".standby" }

// ReadLease returns who holds service's lease, if anyone (a service run
// by heed up holds none: it is the only instance).
func ReadLease(ctx context.Context, js jetstream.JetStream, service string) (LeaseHolder, bool) {
	kv, err := js.KeyValue(ctx, LeaseBucket)
	if err != nil {
		return LeaseHolder{}, false
	}
	e, err := kv.Get(ctx, service)
	if err != nil {
		return LeaseHolder{}, false
	}
	var h LeaseHolder
	return h, json.Unmarshal(e.Value(), &h) == nil
}

// LeaseHolder is the value of a lease key.
type LeaseHolder struct {
	Service string    `json:"service"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Since   time.Time `json:"since"`
}

func (h LeaseHolder) String() string {
	return fmt.Sprintf("%s on %s (pid %d, since %s)", h.Service, h.Host, h.PID, h.Since.UTC().Format(time.RFC3339))
}

// Lease is a held lease.
type Lease struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	key    string
	ttl    time.Duration
	holder LeaseHolder
	rev    uint64
	log    *slog.Logger
	// okAt is when the last write that holds the lease was sent (sent, not
	// acknowledged: the key expires a TTL after it was stored, which is
	// no earlier), by the monotonic clock.
	okAt atomic.Pointer[time.Time]
}

// Fresh reports whether the lease is surely still this instance's: its
// last write was sent less than four fifths of a TTL ago. An instance
// paused past that (SIGSTOP, a VM frozen) may have been replaced by a
// stand-by: what it received meanwhile (commands sitting in its socket)
// must not run when it resumes, before the keeper notices.
func (l *Lease) Fresh() bool {
	if l == nil {
		return true
	}
	at := l.okAt.Load()
	if at == nil {
		return false
	}
	// By the monotonic clock (which a SIGSTOP does not stop) and by the
	// wall clock (Linux's monotonic clock does not count a suspended
	// machine, and a frozen VM may not either): both must be recent.
	bound := l.ttl * 4 / 5
	return time.Since(*at) < bound && time.Now().Round(0).Sub(at.Round(0)) < bound
}

func (l *Lease) ok(sent time.Time) { l.okAt.Store(&sent) }

// ErrLeaseLost is why a service stops when its lease was taken from it.
var ErrLeaseLost = errors.New("lost the lease: another instance may be active (this one was paused or cut off past the lease's TTL)")

// AcquireLease returns once this process holds the lease of service,
// standing by (and saying so, once) while another instance holds it.
func AcquireLease(ctx context.Context, js jetstream.JetStream, topo events.Topology, service string, ttl time.Duration, log *slog.Logger) (*Lease, error) {
	if err := events.ProvisionBucket(ctx, js, topo, events.BucketSpec{Name: LeaseBucket, Description: "heed leases: which instance of each service is active"}); err != nil {
		return nil, err
	}
	kv, err := events.BindBucket(ctx, js, LeaseBucket)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: "lease bucket: " + err.Error(), Err: err}
	}
	host, _ := os.Hostname()
	l := &Lease{js: js, kv: kv, key: service, ttl: ttl, log: log,
		holder: LeaseHolder{Service: service, Host: host, PID: os.Getpid(), Since: time.Now().UTC()}}
	value, err := json.Marshal(l.holder)
	if err != nil {
		return nil, err
	}
	said := false
	// While it stands by, it says so to whoever asks (heed status).
	standby, err := js.Conn().Subscribe(StandbySubject(service), func(m *nats.Msg) { _ = m.Respond(value) })
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: "stand-by: " + err.Error(), Err: err}
	}
	defer func() { _ = standby.Unsubscribe() }()
	// A release (a clean stop's delete) wakes the stand-by at once; the
	// poll below is for an expiry, which no watcher hears.
	var released <-chan jetstream.KeyValueEntry
	if w, err := kv.Watch(ctx, l.key, jetstream.UpdatesOnly()); err == nil {
		defer func() { _ = w.Stop() }()
		released = w.Updates()
	}
	for {
		sent := time.Now()
		rev, err := kv.Create(ctx, l.key, value, jetstream.KeyTTL(ttl))
		if err == nil {
			l.rev = rev
			l.ok(sent)
			if said {
				log.Info("took over as the active instance", "lease", LeaseBucket+"."+l.key)
			} else {
				log.Info("active: this instance holds the lease", "lease", LeaseBucket+"."+l.key, "lease_ttl", ttl)
			}
			return l, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			log.Warn("lease: cannot read or take it; trying again", "err", err)
		} else if other, ok := l.current(ctx); ok {
			if other.Host == host && other.PID != l.holder.PID && !pidAlive(other.PID) {
				// This host's previous instance, dead (a kill -9 and a
				// restart): take its lease now rather than after the TTL.
				sent := time.Now()
				if rev, err := l.takeOver(ctx, value); err == nil {
					l.rev = rev
					l.ok(sent)
					log.Info("took over the lease of this host's previous instance, which is gone", "previous_pid", other.PID)
					return l, nil
				}
			} else if !said {
				log.Info("standing by: another instance is active", "active", other.String(), "lease_ttl", ttl)
				said = true
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case _, ok := <-released:
			if !ok {
				released = nil // the watch ended: the poll alone
			}
		case <-time.After(max(ttl/5, 100*time.Millisecond)):
		}
	}
}

// current reads who holds the lease now.
func (l *Lease) current(ctx context.Context) (LeaseHolder, bool) {
	e, err := l.kv.Get(ctx, l.key)
	if err != nil {
		return LeaseHolder{}, false
	}
	var h LeaseHolder
	if json.Unmarshal(e.Value(), &h) != nil {
		return LeaseHolder{}, false
	}
	return h, true
}

// takeOver replaces the lease's value, guarded by its last revision.
func (l *Lease) takeOver(ctx context.Context, value []byte) (uint64, error) {
	e, err := l.kv.Get(ctx, l.key)
	if err != nil {
		return 0, err
	}
	return l.write(ctx, value, e.Revision())
}

// write publishes the lease's value with its TTL, expecting the key's
// last revision to be rev (a KV update cannot carry a TTL).
func (l *Lease) write(ctx context.Context, value []byte, rev uint64) (uint64, error) {
	m := nats.NewMsg("$KV." + LeaseBucket + "." + l.key)
	m.Data = value
	m.Header.Set(jetstream.MsgTTLHeader, l.ttl.String())
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	ack, err := l.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Keep refreshes the lease every fifth of its TTL until ctx is done. It
// returns ErrLeaseLost when the lease is no longer this instance's (then
// the service must stop at once), or ctx's error.
func (l *Lease) Keep(ctx context.Context) error {
	value, err := json.Marshal(l.holder)
	if err != nil {
		return err
	}
	t := time.NewTicker(l.ttl / 5)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		sent := time.Now()
		wctx, cancel := context.WithTimeout(ctx, l.ttl/5)
		rev, err := l.write(wctx, value, l.rev)
		cancel()
		switch {
		case err == nil:
			l.rev, lastOK = rev, time.Now()
			l.ok(sent)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err):
			// A refresh that timed out here may have been stored after
			// all: the lease is then still this instance's, at a later
			// revision than it knew. Read from the leader (a replica behind
			// could show this instance's old value after a stand-by took
			// over); lastOK stays: the next refresh, from the revision
			// adopted, says whether the lease is kept.
			rctx, cancel := context.WithTimeout(ctx, l.ttl/5)
			value, rev, gerr := events.BucketLeaderGet(rctx, l.js, LeaseBucket, l.key)
			cancel()
			if gerr != nil {
				// No answer (the bucket has no leader while the cluster
				// has no quorum): nothing says the lease is another's; it
				// is lost only once a whole TTL passes without a refresh.
				if time.Since(lastOK) >= l.ttl {
					return fmt.Errorf("%w (no refresh for %s: %v)", ErrLeaseLost, time.Since(lastOK).Round(time.Millisecond), gerr)
				}
				l.log.Warn("lease: refresh refused and the lease cannot be read; trying again", "err", err, "read", gerr)
				continue
			}
			if rev <= l.rev || !l.ours(value) {
				return ErrLeaseLost
			}
			l.rev = rev
		case time.Since(lastOK) >= l.ttl:
			// Cut off from the cluster for the whole TTL: a stand-by may
			// have taken over.
			return fmt.Errorf("%w (no refresh for %s: %v)", ErrLeaseLost, time.Since(lastOK).Round(time.Millisecond), err)
		default:
			l.log.Warn("lease: refresh failed; trying again", "err", err)
		}
	}
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	// Replicated streams answer 10164 where a single server says 10071.
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Release gives the lease up (a clean stop), so that a stand-by takes
// over at once.
func (l *Lease) Release(ctx context.Context) {
	// By the revision read now: a refresh cut short by the stop may have
	// been stored after all, and then the lease is at a later revision
	// than this instance knows.
	// The stream may store that refresh just after this read: read again
	// when the delete finds a later revision.
	var err error
	for range 5 {
		var e jetstream.KeyValueEntry
		if e, err = l.kv.Get(ctx, l.key); err != nil {
			break
		}
		if !l.ours(e.Value()) {
			return // not ours any more
		}
		if err = l.kv.Delete(ctx, l.key, jetstream.LastRevision(e.Revision())); err == nil || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSequence(err) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		l.log.Warn("lease: release failed (a stand-by takes over when it expires)", "err", err)
	}
}

// ours says whether a lease value is this instance's (a holder's start
// time, host and pid are its own).
func (l *Lease) ours(value []byte) bool {
	var h LeaseHolder
	return json.Unmarshal(value, &h) == nil && h.Host == l.holder.Host && h.PID == l.holder.PID && h.Since.Equal(l.holder.Since)
}

// pidAlive reports whether a process with pid runs on this host.
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
