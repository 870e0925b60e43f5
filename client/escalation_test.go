package client_test

import (
	"testing"
	"time"

	"github.com/heedhq/heed/events"
)

// WaitEscalation follows the escalation until it is decided, also when the
// decision is written after the wait began.
func TestWaitEscalation(t *testing.T) {
	c, bus, ctx := setup(t)
	publish(t, ctx, bus, events.EscalationRequested, "e1", "e1/requested", events.EscalationRequestedData{Session: "agent/s", Operation: "deploy", Requester: "agent/s"})
	publish(t, ctx, bus, events.EscalationRouted, "e1", "e1/routed", events.EscalationRoutedData{Decision: events.RouteEscalate, Risk: 0.6, RiskSource: events.RiskFromRequest, Confidence: 0.8, Reason: "MEDIUM RISK", Tier: "tier1", Priority: 8})
	// The publish's ack can reach this goroutine after the wait has seen the
	// event and returned: the test waits for it before its cleanup closes
	// the connection.
	published := make(chan struct{})
	go func() {
		defer close(published)
		time.Sleep(50 * time.Millisecond) // decided after the wait began
		ev, err := events.NewEvent(events.EscalationDecided, "e1", "e1/decided", "test", events.EscalationDecidedData{Decision: events.EscalationApproved, Method: events.MethodUser, By: "user:alice", Operation: "deploy", HeldMS: 50})
		if err == nil {
			_, err = bus.Publish(ctx, &ev)
		}
		if err != nil {
			t.Error(err)
		}
	}()
	st, err := c.WaitEscalation(ctx, "e1")
	<-published
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != events.EscalationApproved || st.Decided == nil || st.Decided.By != "user:alice" || st.Routed == nil || st.Routed.Tier != "tier1" || st.Request.Operation != "deploy" {
		t.Errorf("state %+v", st)
	}
	if _, err := c.WaitEscalation(ctx, "not an id"); events.CodeOf(err) != events.CodeInvalidRequest {
		t.Errorf("bad id: %v", err)
	}
}
