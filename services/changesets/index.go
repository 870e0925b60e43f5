package changesets

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/nats-io/nats.go/jetstream"
)

// openIndex is the service's memory of the open sets (pending or
// partially resolved): what heed.cmd.changeset.list answers from and
// what the expiry looks at. It is a projection: loaded from
// heed_changesets at start, kept by the projector and by what the service
// writes.
type openIndex struct {
	mu   sync.Mutex
	sets map[string]command.ChangeSetState
}

func newOpenIndex() *openIndex { return &openIndex{sets: map[string]command.ChangeSetState{}} }

func (o *openIndex) load(ctx context.Context, kv jetstream.KeyValue) error {
	err := events.ScanBucket(ctx, kv, "set.>", func(_ string, value []byte) error {
		var st command.ChangeSetState
		if readmodel.Decode(value, &st) {
			o.apply(st)
		}
		return nil
	})
	if err != nil {
		return &events.Error{Code: events.CodeUnavailable, Message: "list " + readmodel.ChangeSetsBucket + ": " + err.Error(), Err: err}
	}
	return nil
}

// apply takes a set's state: kept while open, forgotten once not. A
// state older than the one held (the projector lags what the service
// wrote) is ignored.
func (o *openIndex) apply(st command.ChangeSetState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur, ok := o.sets[st.ID]; ok && st.Seq > 0 && cur.Seq > st.Seq {
		return
	}
	if changeset.Open(&st) {
		o.sets[st.ID] = st
		return
	}
	delete(o.sets, st.ID)
}

func (o *openIndex) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.sets)
}

// due lists the open sets whose time ran out at now.
func (o *openIndex) due(now time.Time) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for id, st := range o.sets {
		if !st.Proposal.ExpiresAt.After(now) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// list is the open sets of agent and subject (empty: any), newest first.
func (o *openIndex) list(agent, subject string) []command.ChangeSetState {
	o.mu.Lock()
	out := make([]command.ChangeSetState, 0, len(o.sets))
	for _, st := range o.sets {
		if matches(&st, agent, subject) {
			out = append(out, st)
		}
	}
	o.mu.Unlock()
	sortNewest(out)
	return out
}

func matches(st *command.ChangeSetState, agent, subject string) bool {
	return (agent == "" || st.Proposal.Agent == agent) && (subject == "" || st.Proposal.Subject == subject)
}

func sortNewest(sets []command.ChangeSetState) { slices.SortFunc(sets, newestFirst) }

// newestFirst is the lists' order: newest first, then by id.
func newestFirst(a, b command.ChangeSetState) int {
	if c := b.ProposedAt.Compare(a.ProposedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}
