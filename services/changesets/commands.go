package changesets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/changeset"
	"github.com/heedhq/heed/lib/service"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// commandTimeout bounds one command.
const commandTimeout = 10 * time.Second

func (s *server) serve(ctx context.Context, rt *service.Runtime) (micro.Service, error) {
	svc, err := micro.AddService(rt.Conn, micro.Config{Name: "heed-changesets-commands", Version: service.Version, Description: "heed change sets: propose, decide, status, list, history"})
	if err != nil {
		return nil, fmt.Errorf("register commands: %w", err)
	}
	v := s.bus.Codec().Validator()
	dl := command.All{command.DeadLetters{Bus: s.bus, Service: "heed-changesets-commands", Log: s.log}, command.Gate(rt.Current)}
	g := svc.AddGroup(events.CommandPrefix + ".changeset")
	for _, ep := range []struct {
		name string
		h    micro.Handler
	}{
		{"propose", command.Handler(ctx, v, command.ChangeSetPropose, commandTimeout, s.propose, dl)},
		{"decide", command.Handler(ctx, v, command.ChangeSetDecide, commandTimeout, s.decide, dl)},
		{"status", command.Handler(ctx, v, command.ChangeSetStatus, commandTimeout, s.status, dl)},
		{"list", command.Handler(ctx, v, command.ChangeSetList, commandTimeout, s.list, dl)},
		{"history", command.Handler(ctx, v, command.ChangeSetHistory, commandTimeout, s.history, dl)},
	} {
		if err := g.AddEndpoint(ep.name, ep.h); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("register commands: %w", err)
		}
	}
	return svc, nil
}

// propose turns the calls into items and writes one proposal per part.
func (s *server) propose(ctx context.Context, req *command.ProposeChangeSet) (any, error) {
	items, err := changeset.Items(s.tools, req.Calls)
	if err != nil {
		var be *changeset.BuildError
		if errors.As(err, &be) {
			return nil, events.Errorf(events.CodeInvalidRequest, "%v: nothing was queued", be)
		}
		return nil, err
	}
	if strings.TrimSpace(req.Agent) == "" || strings.TrimSpace(req.Subject) == "" {
		return nil, events.Errorf(events.CodeInvalidRequest, "a change set needs an agent and a subject")
	}
	base := req.ID
	if base == "" {
		base = "cs-" + strings.ToLower(ulid.Make().String())
	}
	if len(items) > events.MaxChangeItems && len(base) > events.MaxIDLength-8 {
		return nil, events.Errorf(events.CodeInvalidRequest, "id %q leaves no room for the parts' suffix (-p<n>)", base)
	}
	expiry := s.cfg.Expiry
	if req.ExpiresS > 0 {
		expiry = time.Duration(req.ExpiresS * float64(time.Second))
	}
	ids, parts := changeset.Parts(base, items)
	data := changeset.Proposals(req, ids, parts, s.now().Add(expiry))
	// Every part is checked before any is written: a part the event's
	// contract refuses, or a named part that exists with other content,
	// refuses the whole proposal with nothing written (it wrote the parts
	// before it, a set pointing at parts that never came).
	prepared := make([]*proposal, len(data))
	for i, d := range data {
		p, err := s.prepareProposal(ctx, ids[i], d, req.ID != "")
		if err != nil {
			return nil, err
		}
		prepared[i] = p
	}
	reply := command.ProposeReply{}
	for _, p := range prepared {
		st, err := s.writeProposal(ctx, p)
		if err != nil {
			return nil, err
		}
		ps := command.ProposedSet{ID: st.ID, ExpiresAt: st.Proposal.ExpiresAt}
		for _, it := range st.Items {
			ps.Items = append(ps.Items, command.ChangeItemRef{ID: events.ChangeItemID(st.ID, it.Item), Item: it.Item, Tool: it.Tool, Summary: it.Summary, From: it.From})
		}
		reply.Sets = append(reply.Sets, ps)
		reply.Queued += len(ps.Items)
	}
	reply.Message = QueuedMessage(reply)
	return reply, nil
}

// QueuedMessage tells the agent what happened to its calls.
func QueuedMessage(r command.ProposeReply) string {
	ids := make([]string, len(r.Sets))
	for i, s := range r.Sets {
		ids[i] = s.ID
	}
	noun := "changes"
	if r.Queued == 1 {
		noun = "change"
	}
	return fmt.Sprintf("%d %s queued for review in %s; do not apply them yourself: confirmed items are applied by heed, and the decisions come back in decision_history", r.Queued, noun, strings.Join(ids, ", "))
}

// proposal is one set's proposal, checked and ready to write (or, the
// same content proposed before, the set as it is).
type proposal struct {
	id       string
	ev       events.Event
	st       *command.ChangeSetState
	existing bool
}

// prepareProposal builds a set's proposal and checks it: against the
// event's contract (invalid_request, naming the field), and for a named
// id against the set in the log: the same content (a retried proposal)
// is the set as it is, other content a conflict.
func (s *server) prepareProposal(ctx context.Context, id string, d events.ChangeSetProposedData, named bool) (*proposal, error) {
	ev, err := events.NewEvent(events.ChangeSetProposed, id, id+"/proposed", Source, d)
	if err != nil {
		return nil, err
	}
	if err := s.bus.Codec().Check(&ev); err != nil {
		return nil, events.Errorf(events.CodeInvalidRequest, "%s: nothing was queued", events.Message(err))
	}
	p := &proposal{id: id, ev: ev, st: changeset.New(id)}
	if named {
		existing, err := changeset.Load(ctx, s.bus, id)
		switch {
		case err == nil:
			if !sameProposal(changeset.ProposalOf(existing), canonical(ev)) {
				return nil, events.Errorf(events.CodeConflict, "change set %s exists with other content (agent %s, subject %s, %d items): a set is never proposed again; nothing was queued", id, existing.Proposal.Agent, existing.Proposal.Subject, len(existing.Items))
			}
			p.st, p.existing = existing, true
			return p, nil
		case events.CodeOf(err) != events.CodeNotFound:
			return nil, err
		}
		p.st = existing
	}
	return p, nil
}

// writeProposal writes a prepared proposal unless the set exists.
func (s *server) writeProposal(ctx context.Context, p *proposal) (*command.ChangeSetState, error) {
	if p.existing {
		return p.st, nil
	}
	id, ev, st := p.id, p.ev, p.st
	ack, err := s.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: events.SubjectFilter("changeset", id), Seq: st.Seq})
	if err != nil {
		if errors.Is(err, events.ErrStaleRead) {
			// Written meanwhile: by the same proposal sent twice at once
			// (it is that set), or by another (a conflict).
			if existing, lerr := changeset.Load(ctx, s.bus, id); lerr == nil && sameProposal(changeset.ProposalOf(existing), canonical(ev)) {
				return existing, nil
			}
			return nil, events.Errorf(events.CodeConflict, "change set %s was written meanwhile with other content", id)
		}
		return nil, err
	}
	if ack.Duplicate {
		return changeset.Load(ctx, s.bus, id)
	}
	if _, err := changeset.Apply(st, &ev, ack.Sequence); err != nil {
		return nil, err
	}
	st.VerdictSeq = ack.Sequence
	s.cache.Put(st)
	s.open.apply(*st)
	return st, nil
}

// canonical is a proposal as the log holds it (JSON round trip).
func canonical(ev events.Event) events.ChangeSetProposedData {
	var d events.ChangeSetProposedData
	_ = json.Unmarshal(ev.Data(), &d)
	return d
}

// sameProposal compares two proposals but for their expiry time (a retry
// computes it again).
func sameProposal(a, b events.ChangeSetProposedData) bool {
	a.ExpiresAt, b.ExpiresAt = time.Time{}, time.Time{}
	for i := range a.Items {
		a.Items[i].Item = i + 1
	}
	return reflect.DeepEqual(a, b)
}

// decide writes one decided event for the named items that are still
// pending; each item's first decision wins.
func (s *server) decide(ctx context.Context, req *command.DecideChangeSet) (any, error) {
	if req.All == (len(req.Items) > 0) {
		return nil, events.Errorf(events.CodeInvalidRequest, "name the items (items: [1, 2]) or all: true, not both")
	}
	if req.All && req.Verdict != events.VerdictConfirmed {
		return nil, events.Errorf(events.CodeInvalidRequest, "all applies to confirmed only (confirm all); reject or defer items by number")
	}
	// Deciding items of one set at once is expected (reviewers, confirm
	// all): in this process they take turns on the set's lock, from the
	// cached copy; a race lost to another writer reads again and decides
	// what is still pending.
	defer s.cache.lock(req.ID)()
	return events.RetryStale(ctx, 20, func() (any, error) {
		st := s.cache.Get(req.ID)
		if st == nil {
			var err error
			if st, err = changeset.Load(ctx, s.bus, req.ID); err != nil {
				return nil, err
			}
		}
		items := req.Items
		if req.All {
			if items = changeset.Pending(st); len(items) == 0 {
				if changeset.Open(st) {
					return nil, events.Errorf(events.CodeConflict, "change set %s has no pending item", req.ID)
				}
				return nil, events.Errorf(events.CodeConflict, "change set %s is %s: nothing is left to decide", req.ID, strings.ReplaceAll(st.Status, "_", " "))
			}
		}
		reply := command.DecideReply{ID: st.ID}
		var decisions []events.ChangeDecision
		var refusals []*events.ChangeRefusal
		seen := map[int]bool{}
		for _, n := range items {
			if seen[n] {
				continue
			}
			seen[n] = true
			dec := events.ChangeDecision{Item: n, Verdict: req.Verdict, Reason: strings.TrimSpace(req.Reason)}
			r := changeset.Judge(st, req.By, dec)
			if r == nil {
				decisions = append(decisions, dec)
				continue
			}
			if r.Code == events.ChangeRefusedDecided {
				w := r.Winner
				reply.Already = append(reply.Already, command.ItemDecided{Item: n, Verdict: w.Verdict, By: w.By, Channel: w.Channel, Reason: changeset.Item(st, n).Reason})
				continue
			}
			refusals = append(refusals, r)
		}
		if len(refusals) > 0 {
			r := refusals[0]
			code := events.CodeInvalidRequest
			if r.Code == events.ChangeRefusedExpired {
				code = events.CodeConflict
			}
			return nil, events.Errorf(code, "%s (%s): nothing was decided", r.Reason, r.Code)
		}
		if len(decisions) == 0 {
			var parts []string
			for _, a := range reply.Already {
				parts = append(parts, fmt.Sprintf("item %d was already %s by %s%s", a.Item, a.Verdict, a.By, via(a.Channel)))
			}
			return nil, events.Errorf(events.CodeConflict, "change set %s: %s", st.ID, strings.Join(parts, "; "))
		}
		data := events.ChangeSetDecidedData{Decisions: decisions, By: req.By, Channel: req.Channel, All: req.All}
		evID := st.ID + "/decided/" + strings.ToLower(ulid.Make().String())
		ev, err := events.NewEvent(events.ChangeSetDecided, st.ID, evID, Source, data)
		if err != nil {
			return nil, err
		}
		ack, err := s.bus.Publish(ctx, &ev, events.ExpectLastSubjectSeq{Subject: changeset.VerdictSubject(st.ID), Seq: st.VerdictSeq})
		if err != nil {
			s.cache.Drop(st.ID)
			return nil, err
		}
		if _, err := changeset.Apply(st, &ev, ack.Sequence); err != nil {
			return nil, err
		}
		st.VerdictSeq = ack.Sequence
		s.cache.Put(st)
		s.open.apply(*st)
		reply.EventID, reply.Status = ev.ID(), st.Status
		for _, d := range decisions {
			reply.Decided = append(reply.Decided, command.ItemDecided{Item: d.Item, Verdict: d.Verdict, Reason: d.Reason, By: req.By, Channel: req.Channel})
		}
		return reply, nil
	})
}

func via(channel string) string {
	if channel == "" {
		return ""
	}
	return " via " + channel
}

// status reads the set from the log; a set too large to send whole
// (its proposal may be 900 KiB, its reasons and results come on top) is
// fitted under the reply's limit (changeset.Fit: args cut, marked
// args_truncated).
func (s *server) status(ctx context.Context, req *command.ChangeSetStatusRequest) (any, error) {
	st, err := changeset.Load(ctx, s.bus, req.ID)
	if err != nil {
		return nil, err
	}
	changeset.Fit(st, changeset.MaxStateBytes)
	return st, nil
}

// maxListedSet is what a set may take in a list reply: a list shows sets,
// not their args whole (status has them).
const maxListedSet = 64 << 10

// list answers from the index of open sets; all sets are read from the
// bucket.
func (s *server) list(ctx context.Context, req *command.ListChangeSets) (any, error) {
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	var afterAt time.Time
	var afterID string
	if req.After != "" {
		var ok bool
		if afterAt, afterID, ok = command.ParseListCursor(req.After); !ok {
			return nil, events.Errorf(events.CodeInvalidRequest, "after %q is not a list's next (give the next of the reply before)", req.After)
		}
	}
	var sets []command.ChangeSetState
	if !req.All {
		sets = s.open.list(req.Agent, req.Subject)
	} else {
		err := events.ScanBucket(ctx, s.kv, "set.>", func(_ string, value []byte) error {
			var st command.ChangeSetState
			if readmodel.Decode(value, &st) && matches(&st, req.Agent, req.Subject) {
				sets = append(sets, st)
			}
			return nil
		})
		if err != nil {
			return nil, &events.Error{Code: events.CodeUnavailable, Message: "list " + readmodel.ChangeSetsBucket + ": " + err.Error(), Err: err}
		}
		sortNewest(sets)
	}
	if req.After != "" {
		// The sets after the cursor's place in the order; the set there
		// may have left the list (resolved) since.
		at := command.ChangeSetState{ID: afterID, ProposedAt: afterAt}
		if i := slices.IndexFunc(sets, func(s command.ChangeSetState) bool { return newestFirst(s, at) > 0 }); i >= 0 {
			sets = sets[i:]
		} else {
			sets = nil
		}
	}
	// Each set fitted, and no more than one reply holds.
	shown, total := 0, 0
	for shown < len(sets) && shown < limit {
		st := changeset.Clone(&sets[shown])
		changeset.Fit(st, maxListedSet)
		b, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		if total += len(b) + 1; total > changeset.MaxStateBytes && shown > 0 {
			break
		}
		sets[shown] = *st
		shown++
	}
	reply := command.ListChangeSetsReply{Sets: sets[:shown], More: len(sets) - shown}
	if reply.More > 0 && shown > 0 {
		reply.Next = command.ListCursor(&sets[shown-1])
	}
	if reply.Sets == nil {
		reply.Sets = []command.ChangeSetState{}
	}
	return reply, nil
}

// history reads the agent's decisions from heed_changesets.
func (s *server) history(ctx context.Context, req *command.DecisionHistoryRequest) (any, error) {
	var hist readmodel.AgentDecisions
	e, err := s.kv.Get(ctx, readmodel.AgentDecisionsKey(req.Agent))
	switch {
	case err == nil:
		readmodel.Decode(e.Value(), &hist)
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, &events.Error{Code: events.CodeUnavailable, Message: "read " + readmodel.ChangeSetsBucket + ": " + err.Error(), Err: err}
	}
	return History(hist.Decisions, req), nil
}

// History is the reply of a history request from an agent's decisions
// (oldest first, as heed_changesets keeps them).
func History(decisions []command.ChangeDecisionRecord, req *command.DecisionHistoryRequest) command.DecisionHistoryReply {
	var newest []command.ChangeDecisionRecord
	for _, d := range slices.Backward(decisions) {
		if req.Subject == "" || d.Subject == req.Subject {
			newest = append(newest, d)
		}
	}
	text, used, omitted := changeset.History(newest, req.Limit, req.BudgetTokens)
	if used == nil {
		used = []command.ChangeDecisionRecord{}
	}
	return command.DecisionHistoryReply{Agent: req.Agent, Subject: req.Subject, Text: text, Tokens: changeset.Tokens(text), Decisions: used, Omitted: omitted}
}
