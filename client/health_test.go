package client_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go"
)

// TestHealthGathersStandbys: every stand-by of a service that answers
// within the wait is listed (three answer here, one of them late but in
// time), and a service nobody answers for is missing, without stand-bys.
func TestHealthGathersStandbys(t *testing.T) {
	c, bus, _ := setup(t)
	nc := bus.JetStream().Conn()
	var want []int
	for pid := 101; pid <= 103; pid++ {
		want = append(want, pid)
		sub, err := nc.Subscribe(service.StandbySubject("runner"), func(m *nats.Msg) {
			if pid == 103 {
				time.Sleep(50 * time.Millisecond)
			}
			b, _ := json.Marshal(service.LeaseHolder{Service: "runner", Host: "h", PID: pid, Since: time.Now()})
			_ = m.Respond(b)
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	h := c.Health(t.Context(), time.Second, "runner", "learner")
	var got []int
	for _, s := range h[0].Standbys {
		got = append(got, s.PID)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("stand-bys of the runner: %v, want %v", got, want)
	}
	if h[1].Status != "missing" || len(h[1].Standbys) != 0 {
		t.Errorf("the learner, which nobody answers for: %+v", h[1])
	}
}
