package changesets

import (
	"context"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/changeset"
)

// expireLoop ends the sets whose time ran out. A set's expiry time is in
// its proposal, so it survives any restart: the index of open sets is
// rebuilt from heed_changesets at start and every set past its time is
// expired then. The expired event has a fixed id (<set-id>/expired) and
// is written only if the set is still open at the log's last position
// (the expected-sequence guard), so it happens once, however many
// instances run and however often they restart.
func (s *server) expireLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ExpiryEvery)
	defer t.Stop()
	for {
		for _, id := range s.open.due(s.now()) {
			if ctx.Err() != nil {
				return
			}
			if err := s.expire(ctx, id); err != nil && ctx.Err() == nil {
				s.log.Warn("expiring a change set failed; will retry", "changeset", id, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// expire writes the set's expiry if it is open and past its time.
func (s *server) expire(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := events.RetryStale(ctx, 5, func() (struct{}, error) {
		st, err := changeset.Load(ctx, s.bus, id)
		if err != nil {
			if events.CodeOf(err) == events.CodeNotFound {
				return struct{}{}, nil
			}
			return struct{}{}, err
		}
		if !changeset.Open(st) || st.Proposal.ExpiresAt.After(s.now()) {
			s.open.apply(*st)
			return struct{}{}, nil
		}
		pending := changeset.Pending(st)
		ev, err := events.NewEvent(events.ChangeSetExpired, id, id+"/expired", Source, events.ChangeSetExpiredData{Items: pending, ExpiresAt: st.Proposal.ExpiresAt})
		if err != nil {
			return struct{}{}, err
		}
		ack, err := s.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("changeset", id), Seq: st.Seq})
		if err != nil {
			return struct{}{}, err
		}
		if _, err := changeset.Apply(st, &ev, ack.Sequence); err != nil {
			return struct{}{}, err
		}
		s.open.apply(*st)
		s.log.Info("change set expired", "changeset", id, "pending", len(pending), "expires_at", st.Proposal.ExpiresAt)
		return struct{}{}, nil
	})
	return err
}
