package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream and bucket names.
const (
	EventStream = "HEED_EVENTS" // the canonical log: every event, plus deadlines
	DLQStream   = "HEED_DLQ"    // messages that are not valid heed events, with the reason
)

// StreamSettings are the tunable limits of one stream.
type StreamSettings struct {
	MaxAge     time.Duration // 0 keeps messages forever
	MaxBytes   int64         // -1 is unlimited
	Duplicates time.Duration // the window in which a repeated Nats-Msg-Id is dropped
}

// Topology is what heed provisions in JetStream. The zero value is not
// useful; start from DefaultTopology.
type Topology struct {
	Events   StreamSettings
	DLQ      StreamSettings
	Replicas int // 1 standalone; 3 on a cluster
	Buckets  []BucketSpec
}

// BucketSpec declares a KV bucket a service owns.
type BucketSpec struct {
	Name        string
	Description string
	History     uint8
}

// DefaultTopology keeps the event log forever (it is the truth: replay
// needs all of it), dead letters for 30 days and at most 1 GiB (a flood of
// bad input drops the oldest, not the disk), and drops duplicate ids seen
// within 10 minutes: long enough to cover a crashed service's restart.
// Services never rely on the window alone; they also check the log before
// acting.
func DefaultTopology() Topology {
	return Topology{
		Events:   StreamSettings{MaxAge: 0, MaxBytes: -1, Duplicates: 10 * time.Minute},
		DLQ:      StreamSettings{MaxAge: 30 * 24 * time.Hour, MaxBytes: 1 << 30, Duplicates: 10 * time.Minute},
		Replicas: 1,
	}
}

// EventStreamConfig is the configuration of the canonical event stream.
func (t Topology) EventStreamConfig() jetstream.StreamConfig {
	subjects := append(EventSubjects(), SchedulePrefix+".>")
	return jetstream.StreamConfig{
		Name:              EventStream,
		Description:       "heed event log: every state change, as CloudEvents (binary mode)",
		Subjects:          subjects,
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          t.replicas(),
		MaxAge:            t.Events.MaxAge,
		MaxBytes:          orUnlimited(t.Events.MaxBytes),
		MaxMsgs:           -1,
		MaxMsgSize:        1 << 20,
		Duplicates:        t.Events.Duplicates,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
		AllowMsgSchedules: true,
		AllowRollup:       true, // schedules need subject rollup; events never use it
		AllowBatchPublish: true, // a decision's events in one round trip, in order (Bus.PublishAll)
	}
}

// DLQStreamConfig is the configuration of the dead-letter stream.
func (t Topology) DLQStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        DLQStream,
		Description: "heed dead letters: original bytes and headers plus Heed-Dlq-Code and Heed-Dlq-Reason",
		Subjects:    []string{DLQPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    t.replicas(),
		MaxAge:      t.DLQ.MaxAge,
		MaxBytes:    orUnlimited(t.DLQ.MaxBytes),
		MaxMsgs:     -1,
		Duplicates:  t.DLQ.Duplicates,
		AllowDirect: true,
	}
}

func (t Topology) replicas() int {
	if t.Replicas < 1 {
		return 1
	}
	return t.Replicas
}

func orUnlimited(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// Provision creates the streams and buckets that are missing and updates
// those whose configuration differs from t; it leaves the others alone. It
// never deletes data: an existing stream keeps its messages, an existing
// bucket its keys. Safe to call concurrently from every service at start.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) error {
	for _, cfg := range []jetstream.StreamConfig{t.EventStreamConfig(), t.DLQStreamConfig()} {
		if err := ensureStream(ctx, js, cfg); err != nil {
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("provision stream %s: %v", cfg.Name, err), Err: err}
		}
	}
	for _, b := range t.Buckets {
		if err := ProvisionBucket(ctx, js, t, b); err != nil {
			return err
		}
	}
	return nil
}

// MaxValueSize bounds one value in a projection bucket: a projection that
// grows a value past it fails loudly (its event is retried, then
// dead-lettered) instead of growing without bound.
const MaxValueSize = 1 << 20

// ProvisionBucket creates one KV bucket, or updates it if its
// configuration differs.
func ProvisionBucket(ctx context.Context, js jetstream.JetStream, t Topology, b BucketSpec) error {
	history := b.History
	if history == 0 {
		history = 1
	}
	err := ensureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:       b.Name,
		Description:  b.Description,
		History:      history,
		Storage:      jetstream.FileStorage,
		Replicas:     t.replicas(),
		MaxValueSize: MaxValueSize,
		// Per-message TTLs, so that the marker of a deleted key expires
		// (DeleteMarkerTTL): deleted keys leave nothing behind.
		LimitMarkerTTL: DeleteMarkerTTL,
	})
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("provision bucket %s: %v", b.Name, err), Err: err}
	}
	return nil
}

// ensureStream creates a stream, or updates it only when its configuration
// differs. The server answers a create whose configuration equals the
// stream's with the stream and changes nothing (an update would apply
// the configuration again, and an update racing another service's
// consumer creation is a data race inside nats-server): unchanged streams
// are left alone, so services provision concurrently.
//
// The duplicate window of an existing stream is the operator's: heed's is
// the default a new stream gets, and one set with `nats stream edit
// --dupe-window` stays (the server keeps every id of the window in
// memory, so a high event rate wants a shorter one; docs/OPERATIONS.md).
//
// Replicas are only ever raised: a service started with fewer than the
// stream has (a stand-by started without --replicas 3) keeps what is
// there. It lowered the log of a whole cluster from three replicas to one,
// with nothing but a log line of its own to say so.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	return WhileUnavailable(ctx, func() error {
		_, err := js.CreateStream(ctx, cfg)
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		s, err := js.Stream(ctx, cfg.Name)
		if err != nil {
			return err
		}
		existing := s.CachedInfo().Config
		d := existing.Duplicates
		if cfg.MaxAge > 0 {
			d = min(d, cfg.MaxAge) // the server refuses a window longer than the age limit
		}
		kept := false
		if existing.Replicas > cfg.Replicas {
			cfg.Replicas, kept = existing.Replicas, true
		}
		if (d > 0 && d != cfg.Duplicates) || kept {
			if d > 0 {
				cfg.Duplicates = d
			}
			if _, err := js.CreateStream(ctx, cfg); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return err // nil: the rest is as heed wants it
			}
		}
		_, err = js.UpdateStream(ctx, cfg)
		return err
	})
}

// ensureKeyValue is ensureStream for a KV bucket: replicas only ever
// raised there too.
func ensureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	return WhileUnavailable(ctx, func() error {
		_, err := js.CreateKeyValue(ctx, cfg)
		if !errors.Is(err, jetstream.ErrBucketExists) {
			return err
		}
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if err != nil {
			return err
		}
		st, err := kv.Status(ctx)
		if err != nil {
			return err
		}
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil && bs.StreamInfo().Config.Replicas > cfg.Replicas {
			cfg.Replicas = bs.StreamInfo().Config.Replicas
			if _, err := js.CreateKeyValue(ctx, cfg); !errors.Is(err, jetstream.ErrBucketExists) {
				return err // nil: the rest is as heed wants it
			}
		}
		_, err = js.UpdateKeyValue(ctx, cfg)
		return err
	})
}

// BindBucket binds an existing KV bucket, trying again while JetStream
// cannot answer (a stream leader being elected after a node was killed):
// a service starting during a failover waits for it instead of exiting.
func BindBucket(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	return bind(ctx, func(actx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(actx, bucket) })
}

// BindStream is BindBucket for a stream.
func BindStream(ctx context.Context, js jetstream.JetStream, stream string) (jetstream.Stream, error) {
	return bind(ctx, func(actx context.Context) (jetstream.Stream, error) { return js.Stream(actx, stream) })
}

// attemptTimeout bounds one attempt of a bind: a request sent as the
// connection dropped is lost, and waiting for its answer until the
// caller's deadline would wait for nothing.
const attemptTimeout = 5 * time.Second

// notFoundGrace is how long a bind takes "not found" for "not visible
// yet": in a cluster, a bucket another service has just created can be
// unknown for a moment to the server that answers the lookup (a runner
// starting beside the service that created the lease bucket exited with
// "bucket not found"). Every bind follows its own provisioning, so a
// bucket still missing after this is missing.
const notFoundGrace = 3 * time.Second

// bind calls get, each attempt bounded by attemptTimeout, while JetStream
// cannot answer, and for notFoundGrace while the stream is not found.
func bind[T any](ctx context.Context, get func(context.Context) (T, error)) (T, error) {
	var v T
	graceEnds := time.Now().Add(notFoundGrace)
	for {
		err := WhileUnavailable(ctx, func() (err error) {
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			defer cancel()
			v, err = get(actx)
			return err
		})
		notFound := errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
		if !notFound || time.Now().After(graceEnds) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ClusterPatience bounds how long provisioning and consumer creation wait
// for JetStream while it is unavailable: a cluster electing a stream's
// leader (a node was killed) answers its API with timeouts, "no
// responders" or 503s for a few seconds.
const ClusterPatience = 90 * time.Second

// WhileUnavailable calls f until it succeeds, fails for a reason other
// than JetStream being unavailable for now, ctx is done or
// ClusterPatience has passed.
func WhileUnavailable(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(ClusterPatience)
	wait := 100 * time.Millisecond
	for {
		err := f()
		if err == nil || !transientJS(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// transientJS reports whether err says JetStream cannot answer now (and
// may soon), rather than that the request is wrong.
func transientJS(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrConnectionReconnecting) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
		return false // it will not be, by waiting
	}
	return apiErr.Code == 503 || apiErr.Code == 500 || apiErr.Code == 408
}
