package confirm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/nats-io/nats.go/jetstream"
)

// consumeDeadlines turns fired deadlines into heed.confirm.expired events.
// A fired deadline is a plain message the server stored on
// heed.schedule.fired.confirm.<id>; the router writes the expired event
// with a deterministic id (JetStream drops a repeat) and the time the
// deadline fired, but only while the confirmation is still open: a
// deadline that fires after an answer (one published straight to the log,
// which cannot cancel the schedule in the same write) changes nothing.
func (r *router) consumeDeadlines(ctx context.Context) (jetstream.ConsumeContext, error) {
	cons, err := r.bus.JetStream().CreateOrUpdateConsumer(ctx, events.EventStream, jetstream.ConsumerConfig{
		Durable:       DeadlineConsumerName,
		Description:   "confirm router: fired confirmation deadlines become heed.confirm.expired",
		FilterSubject: confirmation.FiredSubject("*"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1000,
	})
	if err != nil {
		return nil, &events.Error{Code: events.CodeUnavailable, Message: fmt.Sprintf("create consumer %s: %v", DeadlineConsumerName, err), Err: err}
	}
	// Deadlines of different confirmations are independent: a burst of
	// them (10,000 falling at once) is worked off by several workers.
	work := make(chan jetstream.Msg, deadlineWorkers)
	for range deadlineWorkers {
		go func() {
			for m := range work {
				if err := r.fired(ctx, m); err != nil {
					r.log.Warn("deadline not handled; will retry", "subject", m.Subject(), "err", err)
					_ = m.NakWithDelay(time.Second)
					continue
				}
				_ = m.Ack()
			}
		}()
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { work <- m }, jetstream.PullHeartbeat(time.Second))
	if err != nil {
		close(work)
		return nil, err
	}
	go func() { <-cc.Closed(); close(work) }()
	return cc, nil
}

// deadlineWorkers handle fired deadlines at once.
const deadlineWorkers = 32

// fired handles one fired deadline.
func (r *router) fired(ctx context.Context, m jetstream.Msg) error {
	var body deadlineBody
	if err := json.Unmarshal(m.Data(), &body); err != nil || !events.ValidID(body.ConfirmID) || m.Subject() != confirmation.FiredSubject(body.ConfirmID) {
		r.log.Warn("ignoring a message that is not a heed deadline", "subject", m.Subject())
		return nil
	}
	meta, err := m.Metadata()
	if err != nil {
		return err
	}
	id := body.ConfirmID
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	attempt := 0
	_, err = events.RetryStale(ctx, 5, func() (struct{}, error) {
		attempt++
		// First from what the answers consumer holds (a burst of deadlines
		// must not read the log once each); if that is stale the write
		// fails as stale, and the log is read.
		v, cached := r.gates.view(id)
		if attempt > 1 || !cached {
			st, err := confirmation.Load(ctx, r.bus, id)
			if err != nil {
				if events.CodeOf(err) == events.CodeNotFound {
					r.m.DeadlineFired(false)
					return struct{}{}, nil
				}
				return struct{}{}, err
			}
			v = deadlineView{open: st.Open(), expired: st.Expired != nil, dflt: st.Gate.Default, runID: st.Gate.RunID, lastSeq: st.LastSeq}
		}
		if !v.open || v.expired {
			r.m.DeadlineFired(false)
			return struct{}{}, nil
		}
		exp, err := events.NewEvent(events.ConfirmExpired, id, id+"/expired", Source, events.ConfirmExpiredData{Deadline: body.Deadline, Default: v.dflt, RunID: v.runID})
		if err != nil {
			return struct{}{}, err
		}
		exp.SetTime(meta.Timestamp.UTC()) // when it fired
		if _, err := r.bus.Publish(ctx, &exp, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("confirm", id), Seq: v.lastSeq}); err != nil {
			return struct{}{}, err
		}
		r.m.DeadlineFired(true)
		r.log.Info("deadline reached", "confirm", id, "deadline", body.Deadline)
		return struct{}{}, nil
	})
	return err
}
