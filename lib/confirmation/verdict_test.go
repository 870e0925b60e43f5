package confirmation

import (
	"context"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
)

// TestLoadAnswerVerdict: an answer whose guard proves it came right after
// the confirmation's first request is judged from one read, with the
// verdict a full read gives; every history where the guard proves less
// (no guard, a guard on other subjects, an expiry or a second question
// between, a question before the question) is read in full, and judged
// as a full read judges it.
func TestLoadAnswerVerdict(t *testing.T) {
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx := context.Background()
	opts := []events.Option{{Label: "Yes", Value: "yes"}, {Label: "No", Value: "no"}}
	req := events.ConfirmRequestedData{Message: "go?", Options: opts, Default: "no", Requester: "test", RunID: "r1"}
	// A question written before the runner's, by someone else, whose
	// options do not have "yes": the first request is the question.
	other := events.ConfirmRequestedData{Message: "other?", Options: []events.Option{{Label: "Maybe", Value: "maybe"}, {Label: "No", Value: "no"}}, Default: "no", Requester: "someone", RunID: "r1"}
	yes := events.ConfirmAnsweredData{Choice: "yes", Method: events.MethodUser, By: "alice"}

	pub := func(typ events.Type, id, eid string, data any, po ...events.PublishOption) uint64 {
		t.Helper()
		ev, err := events.NewEvent(typ, id, eid, "test", data)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := bus.Publish(ctx, &ev, po...)
		if err != nil {
			t.Fatalf("publish %s %s: %v", typ, eid, err)
		}
		return ack.Sequence
	}
	guard := func(id string, seq uint64) events.PublishOption {
		return events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: seq}
	}
	cases := []struct {
		name string
		// write writes the confirmation's history and returns the
		// answer's publish options (nil: no guard).
		write func(id string) []events.PublishOption
		fast  bool   // judged from one read
		want  string // the refusal code, "" when it takes effect, "counted" for a vote
	}{
		{"right after the question", func(id string) []events.PublishOption {
			return []events.PublishOption{guard(id, pub(events.ConfirmRequested, id, id+"/requested", req, guard(id, 0)))}
		}, true, ""},
		{"a refused choice right after the question", func(id string) []events.PublishOption {
			return []events.PublishOption{guard(id, pub(events.ConfirmRequested, id, id+"/requested", other, guard(id, 0)))}
		}, true, RefusedChoice},
		{"a first vote of a quorum", func(id string) []events.PublishOption {
			q := req
			q.Approvers, q.Quorum = []string{"alice", "bob", "carol"}, &events.Quorum{Required: 2}
			return []events.PublishOption{guard(id, pub(events.ConfirmRequested, id, id+"/requested", q, guard(id, 0)))}
		}, true, "counted"},
		{"no guard", func(id string) []events.PublishOption {
			pub(events.ConfirmRequested, id, id+"/requested", req)
			return nil
		}, false, ""},
		{"a guard on another confirmation's subjects", func(id string) []events.PublishOption {
			pub(events.ConfirmRequested, id, id+"/requested", req)
			return []events.PublishOption{events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id+"x"), Seq: 0}}
		}, false, ""},
		{"after the expiry", func(id string) []events.PublishOption {
			pub(events.ConfirmRequested, id, id+"/requested", req)
			return []events.PublishOption{guard(id, pub(events.ConfirmExpired, id, id+"/expired", events.ConfirmExpiredData{Default: "no"}))}
		}, false, RefusedExpired},
		{"a question before the question", func(id string) []events.PublishOption {
			pub(events.ConfirmRequested, id, id+"/first", other)
			return []events.PublishOption{guard(id, pub(events.ConfirmRequested, id, id+"/requested", req))}
		}, false, RefusedChoice},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "c" + string(rune('a'+i))
			po := tc.write(id)
			seq := pub(events.ConfirmAnswered, id, id+"/answer", yes, po...)
			// The answer as a consumer is handed it: stored, with its headers.
			raw, _, err := events.FirstOf(ctx, bus.JetStream(), events.EventStream, events.ConfirmAnswered.Subject(id), 0)
			if err != nil || raw == nil || raw.Seq != seq {
				t.Fatalf("read the answer back: %v %v", raw, err)
			}
			ev, err := bus.Codec().DecodeStored(*raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := answerAfterRequest(ctx, bus, ev, seq, raw.Header) != nil; got != tc.fast {
				t.Errorf("judged from one read: %v, want %v", got, tc.fast)
			}
			st, err := LoadAnswerVerdict(ctx, bus, ev, seq, raw.Header)
			if err != nil {
				t.Fatal(err)
			}
			full, err := LoadVerdictsAt(ctx, bus, id, seq)
			if err != nil {
				t.Fatal(err)
			}
			verdict := func(st *State) string {
				a, ok := st.AnswerAt(seq)
				switch {
				case !ok:
					return "missing"
				case a.Refusal != nil:
					return a.Refusal.Code
				case a.Counted:
					return "counted"
				}
				return ""
			}
			if got, f := verdict(st), verdict(full); got != tc.want || f != tc.want {
				t.Errorf("verdict %q (a full read: %q), want %q", got, f, tc.want)
			}
			if st.Gate.RunID != "r1" {
				t.Errorf("the gate's run %q, want r1", st.Gate.RunID)
			}
		})
	}
}
