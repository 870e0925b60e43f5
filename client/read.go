package client

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/nats-io/nats.go/jetstream"
)

// Confirmation reads a confirmation from the log: its request, the answer
// that took effect (if any), every answer with its verdict.
func (c *Client) Confirmation(ctx context.Context, id string) (*confirmation.State, error) {
	return confirmation.Load(ctx, c.bus, id)
}

// Stored is one message of the log: a valid event, or what the gate
// refused (Event nil, Err why).
type Stored struct {
	Seq   uint64
	Event *events.Event
	Err   error
	Raw   events.RawMsg
}

// History reads every message on the given subject filters, in log order.
// One filter (an aggregate's history) is read with direct gets, leaving
// nothing on the server; several with a consumer that is deleted after.
func (c *Client) History(ctx context.Context, filters ...string) ([]Stored, error) {
	var out []Stored
	keep := func(raw events.RawMsg) error {
		ev, err := c.bus.Codec().DecodeStored(raw)
		out = append(out, Stored{Seq: raw.Seq, Event: ev, Err: err, Raw: raw})
		return nil
	}
	var err error
	if len(filters) == 1 {
		_, err = events.ReadHistory(ctx, c.bus.JetStream(), events.EventStream, filters[0], 0, keep)
	} else {
		_, err = events.ReadLog(ctx, c.bus.JetStream(), events.EventStream, filters, 0, keep)
	}
	return out, err
}

// Values reads every live value of a read-model bucket into a map from
// key to T. Keys whose value is not a T (a projection's working state,
// such as heed_decisions' req.* keys) are skipped when keep says so.
func Values[T any](ctx context.Context, c *Client, bucket string, keep func(key string) bool) (map[string]T, error) {
	kv, err := c.bus.JetStream().KeyValue(ctx, bucket)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("bucket %s (is heed running every service?): %v", bucket, err), Err: err}
	}
	out := map[string]T{}
	err = events.ScanBucket(ctx, kv, "", func(k string, value []byte) error {
		if keep != nil && !keep(k) {
			return nil
		}
		var v T
		if readmodel.Decode(value, &v) {
			out[k] = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Index lists index entries of one kind (run, confirm, pref, fix), most
// recently changed first.
func (c *Client) Index(ctx context.Context, kind string) ([]readmodel.IndexEntry, error) {
	kv, err := c.bus.JetStream().KeyValue(ctx, readmodel.IndexBucket)
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("index bucket (is the indexer running?): %v", err), Err: err}
	}
	var out []readmodel.IndexEntry
	err = events.ScanBucket(ctx, kv, kind+".>", func(_ string, value []byte) error {
		var x readmodel.IndexEntry
		if readmodel.Decode(value, &x) {
			out = append(out, x)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Last.Time.After(out[j].Last.Time) })
	return out, nil
}

// IndexEntry reads one aggregate's index entry.
func (c *Client) IndexEntry(ctx context.Context, kind, id string) (readmodel.IndexEntry, bool, error) {
	kv, err := c.bus.JetStream().KeyValue(ctx, readmodel.IndexBucket)
	if err != nil {
		return readmodel.IndexEntry{}, false, err
	}
	e, err := kv.Get(ctx, readmodel.IndexKey(kind, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return readmodel.IndexEntry{}, false, nil
	}
	if err != nil {
		return readmodel.IndexEntry{}, false, err
	}
	var x readmodel.IndexEntry
	return x, readmodel.Decode(e.Value(), &x), nil
}

// Prefs lists remembered choices, oldest first.
func (c *Client) Prefs(ctx context.Context) ([]readmodel.Pref, error) {
	m, err := Values[readmodel.Pref](ctx, c, readmodel.PrefsBucket, nil)
	out := sortedValues(m, func(a, b readmodel.Pref) bool { return a.SetAt.Before(b.SetAt) })
	return out, err
}

// Pref reads one remembered choice.
func (c *Client) Pref(ctx context.Context, id string) (readmodel.Pref, bool, error) {
	return get[readmodel.Pref](ctx, c, readmodel.PrefsBucket, id)
}

// Fixes lists learned fixes, oldest first.
func (c *Client) Fixes(ctx context.Context) ([]readmodel.Fix, error) {
	m, err := Values[readmodel.Fix](ctx, c, readmodel.FixesBucket, nil)
	return sortedValues(m, func(a, b readmodel.Fix) bool { return a.LearnedAt.Before(b.LearnedAt) }), err
}

// Fix reads one learned fix.
func (c *Client) Fix(ctx context.Context, id string) (readmodel.Fix, bool, error) {
	return get[readmodel.Fix](ctx, c, readmodel.FixesBucket, id)
}

// Patterns lists usage patterns, most confident first.
func (c *Client) Patterns(ctx context.Context) ([]readmodel.Pattern, error) {
	m, err := Values[readmodel.Pattern](ctx, c, readmodel.PatternsBucket, func(k string) bool { return len(k) > 4 && k[:4] == "pat-" })
	return sortedValues(m, func(a, b readmodel.Pattern) bool {
		if a.Confidence != b.Confidence {
			return a.Confidence > b.Confidence
		}
		return a.ID < b.ID
	}), err
}

// Stats reads the failure statistics.
func (c *Client) Stats(ctx context.Context) (readmodel.FailureStats, error) {
	st, _, err := get[readmodel.FailureStats](ctx, c, readmodel.StatsBucket, readmodel.StatsKey)
	return st, err
}

// EscalationStats reads the escalation statistics.
func (c *Client) EscalationStats(ctx context.Context) (readmodel.EscalationStats, error) {
	st, _, err := get[readmodel.EscalationStats](ctx, c, readmodel.StatsBucket, readmodel.EscalationStatsKey)
	return st, err
}

// Decisions lists the decision statistics per operation and scope.
func (c *Client) Decisions(ctx context.Context) ([]readmodel.Decision, error) {
	m, err := Values[readmodel.Decision](ctx, c, readmodel.DecisionsBucket, func(k string) bool { return len(k) > 3 && k[:3] == "op." })
	return sortedValues(m, func(a, b readmodel.Decision) bool {
		if a.Operation != b.Operation {
			return a.Operation < b.Operation
		}
		if a.Environment != b.Environment {
			return a.Environment < b.Environment
		}
		return a.Scope < b.Scope
	}), err
}

func get[T any](ctx context.Context, c *Client, bucket, key string) (T, bool, error) {
	var v T
	kv, err := c.bus.JetStream().KeyValue(ctx, bucket)
	if err != nil {
		return v, false, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("bucket %s (is heed running every service?): %v", bucket, err), Err: err}
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	return v, readmodel.Decode(e.Value(), &v), nil
}

func sortedValues[T any](m map[string]T, less func(a, b T) bool) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return less(out[i], out[j]) })
	return out
}

// Run folds a run's history from the log into its state, as every service
// sees it (lib/runstate).
func (c *Client) Run(ctx context.Context, id string) (*runstate.Run, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidRequest, "%q is not a valid run id", id)
	}
	r, err := runstate.Load(ctx, c.bus, id, c.skills)
	if err != nil {
		return nil, err
	}
	if r.LastSeq == 0 {
		return nil, events.Errorf(events.CodeNotFound, "no run %q in the log", id)
	}
	return r, nil
}

// ChangeStats lists every agent's change-set decision counts per tool
// (heed_changesets stats.<token>), agents in name order.
func (c *Client) ChangeStats(ctx context.Context) ([]readmodel.ChangeStats, error) {
	m, err := Values[readmodel.ChangeStats](ctx, c, readmodel.ChangeSetsBucket, func(k string) bool { return len(k) > 6 && k[:6] == "stats." })
	return sortedValues(m, func(a, b readmodel.ChangeStats) bool { return a.Agent < b.Agent }), err
}
