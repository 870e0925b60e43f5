package confirmation_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/confirmation"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

func request(runID string) events.ConfirmRequestedData {
	return events.ConfirmRequestedData{
		Message: "Release?", Requester: "heed/runner", RunID: runID, Default: "cancel",
		Options: []events.Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}},
	}
}

func ev(t *testing.T, typ events.Type, id, eventID string, at time.Duration, data any) *events.Event {
	t.Helper()
	e, err := events.NewEvent(typ, id, eventID, "test", data)
	if err != nil {
		t.Fatal(err)
	}
	e.SetTime(t0.Add(at))
	return &e
}

// TestFirstValidAnswerTakesEffect folds histories as they could appear in
// the log, written by anyone, and checks which answer takes effect and why
// the others are refused.
func TestFirstValidAnswerTakesEffect(t *testing.T) {
	answer := func(choice, by, method, runID string) events.ConfirmAnsweredData {
		return events.ConfirmAnsweredData{Choice: choice, By: by, Method: method, RunID: runID}
	}
	type step struct {
		typ  events.Type
		data any
		// want, for an answer: "" (takes effect) or the refusal code.
		want string
	}
	req := request("r1")
	cases := []struct {
		name   string
		steps  []step
		winner string // by of the answer that took effect; "" none
	}{
		{"one answer", []step{{events.ConfirmRequested, req, ""}, {events.ConfirmAnswered, answer("proceed", "alice", events.MethodUser, ""), ""}}, "alice"},
		{"the first of two wins", []step{
			{events.ConfirmRequested, req, ""},
			{events.ConfirmAnswered, answer("cancel", "bob", events.MethodUser, "r1"), ""},
			{events.ConfirmAnswered, answer("proceed", "alice", events.MethodUser, "r1"), confirmation.RefusedAnswered},
		}, "bob"},
		{"an answer before its question is refused", []step{
			{events.ConfirmAnswered, answer("proceed", "eve", events.MethodUser, ""), confirmation.RefusedNoRequest},
			{events.ConfirmRequested, req, ""},
			{events.ConfirmAnswered, answer("cancel", "bob", events.MethodUser, ""), ""},
		}, "bob"},
		{"a choice that is not an option is refused and the next valid one wins", []step{
			{events.ConfirmRequested, req, ""},
			{events.ConfirmAnswered, answer("launch_missiles", "eve", events.MethodUser, ""), confirmation.RefusedChoice},
			{events.ConfirmAnswered, answer("proceed", "alice", events.MethodUser, ""), ""},
		}, "alice"},
		{"an answer naming another run is refused", []step{
			{events.ConfirmRequested, req, ""},
			{events.ConfirmAnswered, answer("proceed", "eve", events.MethodUser, "r2"), confirmation.RefusedRunMismatch},
		}, ""},
		{"after the deadline only its own default applies", []step{
			{events.ConfirmRequested, req, ""},
			{events.ConfirmExpired, events.ConfirmExpiredData{Deadline: t0, Default: "cancel", RunID: "r1"}, ""},
			{events.ConfirmAnswered, answer("proceed", "late", events.MethodUser, ""), confirmation.RefusedExpired},
			{events.ConfirmAnswered, answer("proceed", "heed/confirm-router", events.MethodTimeout, ""), confirmation.RefusedExpired},
			{events.ConfirmAnswered, answer("cancel", "heed/confirm-router", events.MethodTimeout, ""), ""},
		}, "heed/confirm-router"},
		{"an expiry after the answer changes nothing", []step{
			{events.ConfirmRequested, req, ""},
			{events.ConfirmAnswered, answer("proceed", "alice", events.MethodUser, ""), ""},
			{events.ConfirmExpired, events.ConfirmExpiredData{Deadline: t0, Default: "cancel"}, ""},
			{events.ConfirmAnswered, answer("cancel", "heed/confirm-router", events.MethodTimeout, ""), confirmation.RefusedAnswered},
		}, "alice"},
		{"a second request changes nothing", []step{
			{events.ConfirmRequested, req, ""},
			{events.ConfirmRequested, events.ConfirmRequestedData{Message: "other", Requester: "eve", Options: []events.Option{{Label: "X", Value: "x"}}}, ""},
			{events.ConfirmAnswered, answer("x", "eve", events.MethodUser, ""), confirmation.RefusedChoice},
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := confirmation.New("c1")
			var gate confirmation.Gate // what a projection keeps, fed the same events
			for i, s := range tc.steps {
				e := ev(t, s.typ, "c1", "e"+string(rune('a'+i)), time.Duration(i)*time.Second, s.data)
				r, err := st.Apply(e, uint64(i+1))
				if err != nil {
					t.Fatal(err)
				}
				var gr *confirmation.Refusal
				switch s.typ {
				case events.ConfirmRequested:
					d := s.data.(events.ConfirmRequestedData)
					gate.Request(&d)
				case events.ConfirmExpired:
					d := s.data.(events.ConfirmExpiredData)
					gate.Expire(&d)
				case events.ConfirmAnswered:
					d := s.data.(events.ConfirmAnsweredData)
					gr = gate.Answer(e.ID(), &d, e.Time(), uint64(i+1))
				}
				if s.typ != events.ConfirmAnswered {
					continue
				}
				got := ""
				if r != nil {
					got = r.Code
				}
				if got != s.want {
					t.Errorf("step %d: refusal %q (%v), want %q", i, got, r, s.want)
				}
				if (gr == nil) != (r == nil) || gr != nil && gr.Code != r.Code {
					t.Errorf("step %d: the gate alone judged %v, the fold %v", i, gr, r)
				}
				if r != nil && r.Code == confirmation.RefusedAnswered && (r.Winner == nil || r.Winner.By != tc.winner) {
					t.Errorf("step %d: refusal names winner %+v, want %s", i, r.Winner, tc.winner)
				}
			}
			gotWinner := ""
			if st.Answer != nil {
				gotWinner = st.Answer.By
			}
			if gotWinner != tc.winner {
				t.Errorf("winner %q, want %q", gotWinner, tc.winner)
			}
			if (gate.Winner == nil) != (tc.winner == "") || gate.Winner != nil && gate.Winner.By != tc.winner {
				t.Errorf("gate winner %+v, want %q", gate.Winner, tc.winner)
			}
			// The gate is plain data: a projection stores it and reads it back.
			b, err := json.Marshal(gate)
			if err != nil {
				t.Fatal(err)
			}
			var back confirmation.Gate
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Open() != gate.Open() || back.Default != gate.Default || len(back.Options) != len(gate.Options) {
				t.Errorf("gate does not survive JSON: %s", b)
			}
		})
	}
}

func TestDefaultIsAlwaysAnOption(t *testing.T) {
	req := request("")
	req.Default = "maybe" // an invalid request straight to the log
	var g confirmation.Gate
	g.Request(&req)
	if g.Default != "cancel" {
		t.Errorf("default %q, want the safe option cancel", g.Default)
	}
}

func TestChoices(t *testing.T) {
	opts := func(vs ...string) *events.ConfirmRequestedData {
		r := &events.ConfirmRequestedData{}
		for _, v := range vs {
			r.Options = append(r.Options, events.Option{Label: v, Value: v})
		}
		return r
	}
	for _, tc := range []struct {
		req           *events.ConfirmRequestedData
		proceed, dflt string
	}{
		{req: opts("proceed", "cancel"), proceed: "proceed", dflt: "cancel"},
		{req: opts("abort", "Approve"), proceed: "Approve", dflt: "abort"},
		{req: opts("small", "large"), proceed: "small", dflt: "large"},
	} {
		if got := confirmation.ProceedChoice(tc.req); got != tc.proceed {
			t.Errorf("ProceedChoice(%v) = %q, want %q", tc.req.Options, got, tc.proceed)
		}
		if got := confirmation.DefaultChoice(tc.req); got != tc.dflt {
			t.Errorf("DefaultChoice(%v) = %q, want %q", tc.req.Options, got, tc.dflt)
		}
	}
}
