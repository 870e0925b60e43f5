package indexer

import (
	"context"
	"fmt"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go/jetstream"
)

// counted is the index projection as the indexer runs it: the same Apply
// (heed replay runs the bare Projection), and each status transition it
// stores moves the runs and confirmations gauges; an answer that takes
// effect records its latency. A redelivered event finds its entry already
// at the new status, so it moves nothing twice.
type counted struct {
	Projection
	m *service.Metrics
}

func (p counted) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	return p.Projection.Apply(ctx, &countingStore{Store: s, m: p.m}, ev)
}

type countingStore struct {
	events.Store
	m      *service.Metrics
	before map[string]readmodel.IndexEntry
}

func (s *countingStore) Get(ctx context.Context, key string, v any) (bool, error) {
	ok, err := s.Store.Get(ctx, key, v)
	if e, isEntry := v.(*readmodel.IndexEntry); isEntry && err == nil {
		if s.before == nil {
			s.before = make(map[string]readmodel.IndexEntry, 1)
		}
		if ok {
			s.before[key] = *e
		} else {
			s.before[key] = readmodel.IndexEntry{}
		}
	}
	return ok, err
}

func (s *countingStore) Put(ctx context.Context, key string, v any) error {
	if err := s.Store.Put(ctx, key, v); err != nil {
		return err
	}
	e, ok := v.(readmodel.IndexEntry)
	if !ok {
		return nil
	}
	old := s.before[key]
	if old.Status == e.Status {
		return nil
	}
	switch e.Kind {
	case "run":
		s.m.AddRuns(old.Status, -1)
		s.m.AddRuns(e.Status, 1)
	case "confirm":
		s.m.AddConfirmations(old.Status, -1)
		s.m.AddConfirmations(e.Status, 1)
		if e.Status == readmodel.StatusAnswered && e.First.Type == string(events.ConfirmRequested) {
			s.m.AnswerLatency(e.Method, e.Last.Time.Sub(e.First.Time))
		}
	}
	return nil
}

// countStates sets the runs and confirmations gauges from the index as it
// is (before the projector starts): right after a restart.
func countStates(ctx context.Context, js jetstream.JetStream, m *service.Metrics) error {
	kv, err := events.BindBucket(ctx, js, readmodel.IndexBucket)
	if err != nil {
		return fmt.Errorf("index bucket: %w", err)
	}
	w, err := kv.WatchFiltered(ctx, []string{"run.>", "confirm.>"}, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("count index states: %w", err)
	}
	defer func() { _ = w.Stop() }()
	runs, confirms := map[string]float64{}, map[string]float64{}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				for st, n := range runs {
					m.AddRuns(st, n)
				}
				for st, n := range confirms {
					m.AddConfirmations(st, n)
				}
				return nil
			}
			var ie readmodel.IndexEntry
			if !readmodel.Decode(e.Value(), &ie) {
				continue
			}
			switch ie.Kind {
			case "run":
				runs[ie.Status]++
			case "confirm":
				confirms[ie.Status]++
			}
		}
	}
}
