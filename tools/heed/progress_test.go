package main

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/confirmation"
)

// While a run waits on a confirmation with nobody asked here, heed run
// repeats how long is left; once the run resumes it stops.
func TestProgressRemindsWhileWaiting(t *testing.T) {
	var out syncBuffer
	p := &progress{out: &out}
	st := &confirmation.State{ID: "c-1", RequestedAt: time.Now(), Gate: confirmation.Gate{Default: "cancel"},
		Request: &events.ConfirmRequestedData{TimeoutS: 300, Options: []events.Option{{Label: "Go", Value: "go"}, {Label: "Cancel", Value: "cancel"}}}}
	p.awaiting(st, st.RequestedAt)
	stop := p.remind(20 * time.Millisecond)
	defer stop()
	still := regexp.MustCompile(`  still waiting for an answer to c-1: (4m 5\d|5m 00)s left \(default: cancel\)\n`)
	checkFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !still.MatchString(out.String()) {
			return fmt.Errorf("no reminder yet:\n%s", out.String())
		}
		return nil
	})
	for _, want := range []string{
		"  choices: go, cancel (default)\n",
		"(5m 00s left); then the default, cancel, applies\n",
		"  answer from another terminal: heed confirm answer c-1 go   (or: heed confirm c-1, to be asked)\n",
	} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(out.String()) {
			t.Errorf("awaiting lacks %q:\n%s", want, out.String())
		}
	}
	p.event(resumedEvent(t))
	p.lock()
	n := len(still.FindAllString(out.String(), -1))
	p.unlock()
	time.Sleep(100 * time.Millisecond) // five reminder periods: none may come
	if m := len(still.FindAllString(out.String(), -1)); m != n {
		t.Errorf("reminders went on after the run resumed (%d, then %d):\n%s", n, m, out.String())
	}
}

func resumedEvent(t *testing.T) *events.Event {
	t.Helper()
	ev, err := events.NewEvent(events.RunResumed, "r-1", "r-1/resumed", "test", events.RunResumedData{Step: "ask", ConfirmID: "c-1", Choice: "go", Method: "user", By: "user:t"})
	if err != nil {
		t.Fatal(err)
	}
	return &ev
}
