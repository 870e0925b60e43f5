package indexer_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/services/indexer"
)

// mapStore is a projection store in memory (the projection's Apply is
// deterministic and sees only the store and the event).
type mapStore map[string]json.RawMessage

func (m mapStore) Get(_ context.Context, key string, v any) (bool, error) {
	b, ok := m[key]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(b, v)
}

func (m mapStore) Put(_ context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	m[key] = b
	return err
}

func (m mapStore) Delete(_ context.Context, key string) error {
	delete(m, key)
	return nil
}

func apply(t *testing.T, s mapStore, typ events.Type, id, eventID string, data any) {
	t.Helper()
	ev, err := events.NewEvent(typ, id, eventID, "test", data)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetTime(time.Date(2026, 11, 23, 9, 0, len(s), 0, time.UTC))
	if err := (indexer.Projection{}).Apply(context.Background(), s, &ev); err != nil {
		t.Fatal(err)
	}
}

func entry(t *testing.T, s mapStore, key string) readmodel.IndexEntry {
	t.Helper()
	var e readmodel.IndexEntry
	if ok, err := s.Get(context.Background(), key, &e); err != nil || !ok {
		t.Fatalf("no entry %s (%v)", key, err)
	}
	return e
}

// TestIndexTakesTheAnswerThatTookEffect: the index agrees with the run and
// the router on the one answer, whoever wrote the others.
func TestIndexTakesTheAnswerThatTookEffect(t *testing.T) {
	s := mapStore{}
	ans := func(eventID, choice, by string) {
		apply(t, s, events.ConfirmAnswered, "c1", eventID, events.ConfirmAnsweredData{Choice: choice, Method: events.MethodUser, By: by})
	}
	ans("early", "proceed", "eve") // before the question: refused
	apply(t, s, events.ConfirmRequested, "c1", "c1/requested", events.ConfirmRequestedData{
		Message: "Release?", Requester: "heed/runner", RunID: "r1", Skill: "release", Step: "confirm",
		Options: []events.Option{{Label: "Proceed", Value: "proceed"}, {Label: "Cancel", Value: "cancel"}},
	})
	if e := entry(t, s, "confirm.c1"); e.Status != readmodel.StatusPending || !e.Open() || e.RunID != "r1" || len(e.Options) != 2 || e.Default != "cancel" {
		t.Fatalf("after the request: %+v", e)
	}
	ans("a1", "launch_missiles", "mallory") // not an option: refused
	ans("a2", "proceed", "alice")           // takes effect
	ans("a3", "cancel", "bob")              // too late: refused
	e := entry(t, s, "confirm.c1")
	if e.Status != readmodel.StatusAnswered || e.Choice != "proceed" || e.By != "alice" || e.AnswerID != "a2" || e.Refused != 3 || e.Count != 5 {
		t.Errorf("entry = %+v; want alice's proceed (a2), 3 refused, 5 events", e)
	}
	apply(t, s, events.ConfirmExpired, "c1", "c1/expired", events.ConfirmExpiredData{Deadline: time.Now(), Default: "cancel"})
	if e := entry(t, s, "confirm.c1"); e.Status != readmodel.StatusAnswered || e.Choice != "proceed" {
		t.Errorf("an expiry after the answer changed the entry: %+v", e)
	}
}

// TestIndexEntryFromBeforeOptions: an entry indexed before the index kept
// a confirmation's options still takes its first answer.
func TestIndexEntryFromBeforeOptions(t *testing.T) {
	s := mapStore{}
	legacy := readmodel.IndexEntry{ID: "c1", Kind: "confirm", Status: readmodel.StatusPending, Count: 1,
		First: readmodel.EventRef{ID: "c1/requested", Type: string(events.ConfirmRequested)}}
	if err := s.Put(context.Background(), "confirm.c1", legacy); err != nil {
		t.Fatal(err)
	}
	apply(t, s, events.ConfirmAnswered, "c1", "a1", events.ConfirmAnsweredData{Choice: "proceed", Method: events.MethodUser, By: "alice"})
	apply(t, s, events.ConfirmAnswered, "c1", "a2", events.ConfirmAnsweredData{Choice: "cancel", Method: events.MethodUser, By: "bob"})
	if e := entry(t, s, "confirm.c1"); e.Status != readmodel.StatusAnswered || e.AnswerID != "a1" || e.Refused != 1 {
		t.Errorf("entry = %+v; want alice's answer a1 and one refused", e)
	}
}

// TestIndexKeepsVotes: partial approvals are visible in the entry, and
// only the vote that completes the quorum answers it.
func TestIndexKeepsVotes(t *testing.T) {
	s := mapStore{}
	apply(t, s, events.ConfirmRequested, "c1", "c1/requested", events.ConfirmRequestedData{
		Message: "Scale?", Requester: "heed/runner", RunID: "r1",
		Options:   []events.Option{{Label: "Approve", Value: "approve"}, {Label: "Deny", Value: "deny"}},
		Approvers: []string{"alice", "bob", "carol"}, Quorum: &events.Quorum{Required: 2},
	})
	vote := func(eventID, by string) {
		apply(t, s, events.ConfirmAnswered, "c1", eventID, events.ConfirmAnsweredData{Choice: "approve", Method: events.MethodUser, By: by})
	}
	vote("a1", "mallory") // not an approver
	vote("a2", "alice")
	vote("a3", "alice") // voted already
	e := entry(t, s, "confirm.c1")
	if !e.Open() || e.Refused != 2 || len(e.Votes) != 1 || e.Votes[0].By != "alice" || e.Quorum == nil || len(e.Approvers) != 3 {
		t.Fatalf("after alice's vote: %+v", e)
	}
	vote("a4", "bob")
	vote("a5", "carol") // after the quorum
	e = entry(t, s, "confirm.c1")
	if e.Status != readmodel.StatusAnswered || e.By != "bob" || e.AnswerID != "a4" || len(e.Votes) != 2 || e.Refused != 3 {
		t.Errorf("after the quorum: %+v; want bob's a4 with 2 votes, 3 refused", e)
	}
}

// TestRefusedFixIsNotIndexed: a fix whose patch could never apply (the
// learner dead-letters it) is not indexed as an active fix either.
func TestRefusedFixIsNotIndexed(t *testing.T) {
	s := mapStore{}
	ev, err := events.NewEvent(events.FixLearned, "fix-bad", "fix-bad/learned", "test", events.FixLearnedData{Tool: "quay_check", ErrorPattern: "x",
		Source: events.FixFromAgent, ArgsPatch: map[string]any{"tag": "{{ nope( }}"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := (indexer.Projection{}).Apply(context.Background(), s, &ev); events.CodeOf(err) != events.CodePoison {
		t.Fatalf("a fix that could never apply: %v, want it refused (poison)", err)
	}
	if _, ok := s[readmodel.IndexKey("fix", "fix-bad")]; ok {
		t.Fatal("a refused fix is in the index")
	}
}

// TestForgettingWhatNeverWasIndexesNothing: a preference's forgotten
// event with no preference before it (the console may write one) makes no
// index entry.
func TestForgettingWhatNeverWasIndexesNothing(t *testing.T) {
	s := mapStore{}
	apply(t, s, events.PrefForgotten, "pref-never", "pref-never/forgotten", events.PrefForgottenData{By: "user:x"})
	if len(s) != 0 {
		t.Fatalf("entries for a preference that never was: %v", s)
	}
}
