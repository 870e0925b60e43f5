package escalator

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
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

// A session's list of held requests is written when a request joins or
// leaves it, or its risk or criticality changes, not for every event of
// a request that stays held; what it holds is the same either way (the
// golden histories, also through crashes: TestProjectionCrashSafe).
func TestSessionListWrittenOnlyWhenItChanges(t *testing.T) {
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
		prev := ""
		for _, ev := range log {
			if err := p.Apply(context.Background(), s, ev); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var e readmodel.Escalation
			if ok, _ := s.Get(context.Background(), readmodel.EscalationKey(ev.Subject()), &e); !ok {
				continue
			}
			session = readmodel.SessionKey(e.Session)
			now := string(s.m[session])
			if now != prev {
				changes++
			}
			prev = now
			// The list holds the request exactly while it is held, with
			// the summary's risk and criticality.
			var se readmodel.SessionEscalations
			_, _ = s.Get(context.Background(), session, &se)
			inList := len(se.Held) == 1 && se.Held[0].ID == e.ID && se.Held[0].Risk == e.Risk && se.Held[0].Critical == e.Critical
			if held := e.Status == events.EscalationHeld; held != inList {
				t.Fatalf("%s: after %s the summary is %s (risk %v, critical %v) and the session's list %+v", filepath.Base(f), ev.Type(), e.Status, e.Risk, e.Critical, se.Held)
			}
		}
		if session != "" && s.writes[session] != changes {
			t.Errorf("%s: the session's list was written %d times and changed %d times", filepath.Base(f), s.writes[session], changes)
		}
	}
}
