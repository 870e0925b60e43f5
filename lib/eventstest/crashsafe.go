package eventstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/heedhq/heed/events"
)

// CrashSafe checks that a projection is safe against a crash halfway
// through an event: for every event of the log and every write it makes,
// the event's application stops before that write (a process killed, a
// write refused while the cluster fails over), the event is delivered
// again and applied in full, and the rest of the log follows; the bucket
// must end as one clean pass leaves it, which is what `heed replay`
// rebuilds. The store behaves as the live projector's does: each key
// remembers the sequence of the event that last wrote it and a write by an
// event not newer is skipped; a delete removes the key.
//
// What it catches: an Apply that writes a marker ("done with this
// request") before the other keys the event changes, so that the
// redelivery sees the marker and skips them.
func CrashSafe(t testing.TB, p events.Projection, log []*events.Event) {
	t.Helper()
	ctx := context.Background()
	apply := func(s *guardStore, from, to int) error {
		for i := from; i < to; i++ {
			s.seq = uint64(i + 1)
			if err := p.Apply(ctx, s, log[i]); err != nil {
				return fmt.Errorf("event %d (%s %s): %w", i+1, log[i].Type(), log[i].Subject(), err)
			}
		}
		return nil
	}
	clean := newGuardStore()
	if err := apply(clean, 0, len(log)); err != nil {
		t.Fatalf("%s: a clean pass failed: %v", p.Name(), err)
	}
	// How many writes each event makes on a clean pass: its crash points.
	counting := newGuardStore()
	writes := make([]int, len(log))
	for i := range log {
		before := counting.attempts
		if err := apply(counting, i, i+1); err != nil {
			t.Fatal(err)
		}
		writes[i] = counting.attempts - before
	}
	failures := 0
	for i := range log {
		for k := range writes[i] {
			s := newGuardStore()
			if err := apply(s, 0, i); err != nil {
				t.Fatal(err)
			}
			s.budget = k
			if err := apply(s, i, i+1); !errors.Is(err, errCrash) {
				t.Fatalf("%s: event %d: the crash before write %d did not happen (%v)", p.Name(), i+1, k+1, err)
			}
			s.budget = -1
			if err := apply(s, i, len(log)); err != nil {
				t.Fatalf("%s: after a crash in event %d: %v", p.Name(), i+1, err)
			}
			if diff := s.diff(clean); diff != "" {
				failures++
				if failures <= 3 {
					t.Errorf("%s: a crash before write %d of %d of event %d (%s %s), then its redelivery, leaves the bucket unlike a clean pass:\n%s",
						p.Name(), k+1, writes[i], i+1, log[i].Type(), log[i].Subject(), diff)
				}
			}
		}
	}
	if failures > 3 {
		t.Errorf("%s: %d crash points in all", p.Name(), failures)
	}
}

var errCrash = errors.New("crashed before this write")

type guarded struct {
	seq   uint64
	value []byte
}

// guardStore is events' live store in memory: writes guarded by the
// writer's sequence, deletes that remove.
type guardStore struct {
	m        map[string]guarded
	seq      uint64
	budget   int // writes left before the crash; -1: no crash
	attempts int
}

func newGuardStore() *guardStore { return &guardStore{m: map[string]guarded{}, budget: -1} }

func (s *guardStore) write() error {
	s.attempts++
	if s.budget == 0 {
		return errCrash
	}
	if s.budget > 0 {
		s.budget--
	}
	return nil
}

func (s *guardStore) Get(_ context.Context, key string, v any) (bool, error) {
	g, ok := s.m[key]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(g.value, v)
}

func (s *guardStore) Put(_ context.Context, key string, v any) error {
	if err := s.write(); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if g, ok := s.m[key]; ok && g.seq >= s.seq {
		return nil // this event wrote it before
	}
	s.m[key] = guarded{seq: s.seq, value: b}
	return nil
}

func (s *guardStore) Delete(_ context.Context, key string) error {
	if err := s.write(); err != nil {
		return err
	}
	delete(s.m, key)
	return nil
}

// diff says how s differs from want, key by key.
func (s *guardStore) diff(want *guardStore) string {
	var b bytes.Buffer
	keys := slices.Sorted(maps.Keys(s.m))
	for _, k := range slices.Sorted(maps.Keys(want.m)) {
		if _, ok := s.m[k]; !ok {
			fmt.Fprintf(&b, "  %s: missing (clean pass: %s)\n", k, want.m[k].value)
		}
	}
	for _, k := range keys {
		w, ok := want.m[k]
		switch {
		case !ok:
			fmt.Fprintf(&b, "  %s: extra: %s\n", k, s.m[k].value)
		case !bytes.Equal(w.value, s.m[k].value):
			fmt.Fprintf(&b, "  %s: %s\n    clean pass: %s\n", k, s.m[k].value, w.value)
		}
	}
	return b.String()
}
