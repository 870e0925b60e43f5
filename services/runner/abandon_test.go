package runner

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/runstate"
)

// TestAbandonEvent: the decision to end an idle run, on folded histories.
func TestAbandonEvent(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	idle := 48 * time.Hour
	fold := func(id string, typs ...events.Type) *runstate.Run {
		t.Helper()
		r := runstate.New(id)
		for i, typ := range typs {
			var data any
			switch typ {
			case events.RunStarted:
				data = events.RunStartedData{Skill: "s", Driver: "agent"}
			case events.RunStepStarted:
				data = events.StepStartedData{Step: "a", Index: 0, Attempt: 1, Kind: "tool", Tool: "t"}
			case events.RunPaused:
				data = events.RunPausedData{Reason: "awaiting_agent", Step: "a", Index: 0}
			case events.RunFailed:
				data = events.RunFailedData{Error: events.ErrorInfo{Message: "x"}}
			case events.RunCompleted:
				data = events.RunCompletedData{}
			case events.RunAbandoned:
				data = events.RunAbandonedData{Reason: "quiet", IdleMS: 1}
			}
			ev, err := events.NewEvent(typ, id, id+"/"+string(typ), "agent/x", data)
			if err != nil {
				t.Fatal(err)
			}
			ev.SetTime(t0)
			if err := r.Apply(&ev, uint64(i+1), nil); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	for _, c := range []struct {
		name    string
		run     *runstate.Run
		now     time.Time
		abandon bool
	}{
		{"an agent's run quiet for the idle time", fold("a1", events.RunStarted, events.RunStepStarted), t0.Add(idle), true},
		{"a paused run quiet for longer", fold("a2", events.RunStarted, events.RunPaused), t0.Add(3 * idle), true},
		{"quiet for less", fold("a3", events.RunStarted, events.RunStepStarted), t0.Add(idle - time.Second), false},
		{"completed", fold("a4", events.RunStarted, events.RunCompleted), t0.Add(3 * idle), false},
		{"failed: waits for a retry, not for time", fold("a5", events.RunStarted, events.RunFailed), t0.Add(3 * idle), false},
		{"abandoned already", fold("a6", events.RunStarted, events.RunAbandoned), t0.Add(3 * idle), false},
		{"no stored event", runstate.New("a7"), t0.Add(3 * idle), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := abandonEvent(c.run, c.now, idle)
			if (ev != nil) != c.abandon {
				t.Fatalf("abandonEvent = %v, want abandon %v", ev, c.abandon)
			}
			if ev == nil {
				return
			}
			if ev.Type() != string(events.RunAbandoned) || ev.ID() != c.run.ID+"/abandoned" || ev.Subject() != c.run.ID {
				t.Errorf("event %s %s on %s; want heed.run.abandoned with id %s/abandoned", ev.Type(), ev.ID(), ev.Subject(), c.run.ID)
			}
			d := decodeData[events.RunAbandonedData](t, ev)
			if d.LastEventID != c.run.LastID || !d.LastEventAt.Equal(t0) || d.IdleMS != float64(c.now.Sub(t0).Milliseconds()) || !strings.Contains(d.Reason, c.run.LastID) {
				t.Errorf("data = %+v; want the last event %s at %s and the idle time", d, c.run.LastID, t0)
			}
			if !ev.Time().Equal(c.now) {
				t.Errorf("time = %s, want now %s", ev.Time(), c.now)
			}
		})
	}
	// The same decision twice gives the same id: JetStream keeps one.
	r := fold("a8", events.RunStarted)
	if a, b := abandonEvent(r, t0.Add(idle), idle), abandonEvent(r, t0.Add(2*idle), idle); a.ID() != b.ID() {
		t.Errorf("ids differ: %s, %s", a.ID(), b.ID())
	}
	if got := abandonEvery(15*time.Second, 48*time.Hour); got != time.Hour {
		t.Errorf("abandonEvery(15s, 48h) = %s, want 1h", got)
	}
	if got := abandonEvery(200*time.Millisecond, time.Second); got != 200*time.Millisecond {
		t.Errorf("abandonEvery(200ms, 1s) = %s, want 200ms", got)
	}
}

func decodeData[T any](t testing.TB, ev *events.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(ev.Data(), &v); err != nil {
		t.Fatalf("%s: %v", ev.Type(), err)
	}
	return v
}
