package escalator

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
)

// writeCounter is a Store that counts the writes of each key.
type writeCounter struct {
	m      map[string]json.RawMessage
	writes map[string]int
}

func (s *writeCounter) Get(_ context.Context, key string, v any) (bool, error) {
	b, ok := s.m[key]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(b, v)
}

func (s *writeCounter) Put(_ context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	s.m[key], s.writes[key] = b, s.writes[key]+1
	return err
}

func (s *writeCounter) Delete(_ context.Context, key string) error {
	delete(s.m, key)
	s.writes[key]++
	return nil
}

// A session's count of held requests is written when a request joins or
// leaves it, or its criticality changes, not for every event of a request
// that stays held; it counts the request exactly while it is held (the
// golden histories, also through crashes: TestProjectionCrashSafe).
func TestSessionCountWrittenOnlyWhenItChanges(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		log := replayGolden(t, f)
		s := &writeCounter{m: map[string]json.RawMessage{}, writes: map[string]int{}}
		p := &Projection{}
		changes := 0
		var session string
		// What a change is: the count or the critical count (every write
		// also changes last, the event that wrote it).
		type counted struct{ present, count, critical int }
		var prev counted
		for _, ev := range log {
			if err := p.Apply(context.Background(), s, ev); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var e readmodel.Escalation
			if ok, _ := s.Get(context.Background(), readmodel.EscalationKey(ev.Subject()), &e); !ok {
				continue
			}
			session = readmodel.SessionKey(e.Session)
			var now counted
			var cur readmodel.SessionEscalations
			if ok, _ := s.Get(context.Background(), session, &cur); ok {
				now = counted{1, cur.Count, cur.Critical}
			}
			if now != prev {
				changes++
			}
			prev = now
			var se readmodel.SessionEscalations
			_, _ = s.Get(context.Background(), session, &se)
			held := e.Status == events.EscalationHeld
			want := readmodel.SessionEscalations{}
			if held {
				want = readmodel.SessionEscalations{Session: e.Session, Count: 1}
				if e.Critical {
					want.Critical = 1
				}
			}
			if held {
				want.Last = se.Last
			}
			if se.Session != want.Session || se.Count != want.Count || se.Critical != want.Critical || se.Listed != nil || (held && se.Last == "") {
				t.Fatalf("%s: after %s the summary is %s (critical %v) and the session's count %+v, want %+v", filepath.Base(f), ev.Type(), e.Status, e.Critical, se, want)
			}
		}
		if session != "" && s.writes[session] != changes {
			t.Errorf("%s: the session's count was written %d times and changed %d times", filepath.Base(f), s.writes[session], changes)
		}
	}
}

// sessionLog is a session's requests: n held (every third critical), then
// all but the last two decided, interleaved with another session's.
func sessionLog(t *testing.T, n int) []*events.Event {
	t.Helper()
	var log []*events.Event
	add := func(typ events.Type, id string, data any) {
		ev, err := events.NewEvent(typ, id, fmt.Sprintf("%s-%s-%d", id, typ, len(log)), Source, data)
		if err != nil {
			t.Fatal(err)
		}
		ev.SetTime(goldenStart.Add(time.Duration(len(log)) * time.Second))
		log = append(log, &ev)
	}
	risk := 0.6
	for i := range n {
		id, session := fmt.Sprintf("e%04d", i), "agent/a"
		if i%4 == 3 {
			session = "agent/b"
		}
		add(events.EscalationRequested, id, events.EscalationRequestedData{Session: session, Operation: "deploy", Risk: &risk})
		add(events.EscalationRouted, id, events.EscalationRoutedData{Decision: "escalate", Risk: risk, Confidence: 0.8, Critical: i%3 == 0, Priority: 8, Tier: "tier1"})
	}
	for i := range n - 2 {
		add(events.EscalationDecided, fmt.Sprintf("e%04d", i), events.EscalationDecidedData{Decision: events.EscalationApproved, Method: events.MethodUser, By: "user:x"})
	}
	return log
}

// The count stays the size of a count however many requests a session
// holds (a list grew with each, and every request rewrote it), it counts
// what is held and critical, and a session with none held has no key.
func TestSessionCountIsConstantWork(t *testing.T) {
	const n = 2000
	log := sessionLog(t, n)
	s := &writeCounter{m: map[string]json.RawMessage{}, writes: map[string]int{}}
	p := &Projection{}
	longest := 0
	for i, ev := range log {
		if err := p.Apply(context.Background(), s, ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		longest = max(longest, len(s.m[readmodel.SessionKey("agent/a")]))
		if i == 2*n-1 {
			// Every request routed, none decided.
			var a, b readmodel.SessionEscalations
			_, _ = s.Get(context.Background(), readmodel.SessionKey("agent/a"), &a)
			_, _ = s.Get(context.Background(), readmodel.SessionKey("agent/b"), &b)
			if a.Count != 1500 || b.Count != 500 || a.Critical+b.Critical != 667 {
				t.Fatalf("all held: a %+v, b %+v; want 1,500 and 500 held, 667 critical in all", a, b)
			}
		}
	}
	if longest > 100 {
		t.Errorf("the session's value grew to %d bytes", longest)
	}
	// e1998 (agent/a, critical) and e1999 (agent/b, not critical) are still held.
	var a, b readmodel.SessionEscalations
	_, _ = s.Get(context.Background(), readmodel.SessionKey("agent/a"), &a)
	_, _ = s.Get(context.Background(), readmodel.SessionKey("agent/b"), &b)
	if a.Count != 1 || a.Critical != 1 || b.Count != 1 || b.Critical != 0 {
		t.Errorf("two left held: a %+v, b %+v", a, b)
	}
	// And through a crash at every write of every event.
	eventstest.CrashSafe(t, &Projection{}, sessionLog(t, 40))
}

// A session's value in the list form heed wrote before is counted from
// its list when next written.
func TestSessionListWrittenBeforeIsCounted(t *testing.T) {
	s := &writeCounter{m: map[string]json.RawMessage{}, writes: map[string]int{}}
	old := readmodel.SessionEscalations{Session: "agent/a", Listed: []readmodel.HeldRef{{ID: "old1", Risk: 0.5}, {ID: "old2", Risk: 0.95, Critical: true}, {ID: "old3", Risk: 0.6}}}
	b, _ := json.Marshal(old)
	if !strings.Contains(string(b), `"held":[{"id":"old1"`) {
		t.Fatalf("the list is not written as it was: %s", b)
	}
	s.m[readmodel.SessionKey("agent/a")] = b
	p := &Projection{}
	for _, ev := range sessionLog(t, 1) {
		if err := p.Apply(context.Background(), s, ev); err != nil {
			t.Fatal(err)
		}
	}
	var se readmodel.SessionEscalations
	_, _ = s.Get(context.Background(), readmodel.SessionKey("agent/a"), &se)
	// The new request (critical: the first of sessionLog) joined the three.
	if se.Count != 4 || se.Critical != 2 || se.Listed != nil {
		t.Errorf("counted %+v; want 4 held, 2 critical, no list", se)
	}
}
