package escalator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
	"github.com/heedhq/heed/lib/escalation"
	"github.com/heedhq/heed/lib/textutil"
)

// Source is the CloudEvents source of the escalator's events.
const Source = "heed/escalator"

// Actor is who decides when no person does.
const Actor = "escalator"

// Option values of an offer's confirmation.
const (
	ChoiceApprove  = "approve"
	ChoiceDeny     = "deny"
	ChoiceEscalate = "escalate"
)

// Facts are what decide knows of the world beyond the escalation's log:
// the clock, whether a tier's members are present (asked only when a tier
// with members is about to be offered), the learned cache.
type Facts struct {
	Now time.Time
	// Reachable reports whether any of members is present, and who was
	// asked. Nil: everyone is.
	Reachable func(tier string, members []string) (bool, []string)
	// Cache is the learner's record of an operation and scope in an
	// environment, nil if none.
	Cache func(operation, environment, scope string) *readmodel.Decision
}

// Cause is what decide reacts to.
type Cause struct {
	// Request is a new escalation request (nil for an answer).
	Request *events.EscalationRequestedData
	// Answer is the answer that took effect on confirmation ConfirmID,
	// with the quorum's votes; Expired says the deadline passed (the
	// default applies).
	ConfirmID string
	Answer    *events.ConfirmAnsweredData
	Votes     []events.EscalationVote
	Expired   bool
}

// Decide returns the events the escalation's state and the cause call
// for. It is pure: a restart reading the same log decides the same events
// with the same ids, so nothing is written twice.
func Decide(rs *Rules, st *command.EscalationState, c Cause, f Facts) ([]events.Event, error) {
	out, _, err := decide(rs, st, c, f)
	return out, err
}

// decide is Decide that also returns the state once its events are folded
// in (folded from their encoded data, as a read of the log would; its Seq
// is st's: the writes give theirs).
func decide(rs *Rules, st *command.EscalationState, c Cause, f Facts) ([]events.Event, *command.EscalationState, error) {
	d := &decision{rs: rs, st: cloneState(st), f: f}
	out, err := d.run(c)
	return out, d.st, err
}

func (d *decision) run(c Cause) ([]events.Event, error) {
	rs, st, f := d.rs, d.st, d.f
	if st.Decided != nil {
		return nil, nil
	}
	if st.Status == "" {
		if c.Request == nil {
			return nil, nil
		}
		ev, err := requestedEvent(st.ID, *c.Request, f.Now)
		if err != nil {
			return nil, err
		}
		if err := d.fold(ev); err != nil {
			return nil, err
		}
	}
	if d.st.Routed == nil {
		routed, err := Route(rs, &d.st.Request, f)
		if err != nil {
			return nil, err
		}
		if err := d.add(events.EscalationRouted, st.ID+"/routed", routed); err != nil {
			return nil, err
		}
	}
	// A route that decides by itself decides now, also when the log
	// holds the route without its decision (a crash between the two, or
	// a reader that read between them): never offered, never a final
	// action.
	// (The decision is made before d.out is read: Go leaves the order of
	// a field read and a call in one return list unspecified.)
	switch r := d.st.Routed; r.Decision {
	case events.RouteAutoApprove, events.RouteConditionalApprove:
		err := d.decide(events.EscalationApproved, events.EscMethodRule, Actor, "", r.Reason, nil)
		return d.out, err
	case events.RouteCachedApprove:
		err := d.decide(events.EscalationApproved, events.EscMethodCache, Actor, "", r.Reason, nil)
		return d.out, err
	case events.RouteDeny:
		err := d.decide(events.EscalationDenied, events.EscMethodRule, Actor, "", r.Reason, nil)
		return d.out, err
	}
	if c.ConfirmID != "" {
		if err := d.answer(c); err != nil {
			return nil, err
		}
	}
	if err := d.advance(); err != nil {
		return nil, err
	}
	// The open offer's confirmation, every time: a restart between the
	// offer and its confirmation writes it then (its id and the guard
	// that it does not exist yet keep it to one).
	if o := d.open(); o != nil && d.st.Decided == nil {
		id := o.ConfirmID + "/requested"
		if !slices.ContainsFunc(d.out, func(ev events.Event) bool { return ev.ID() == id }) {
			ev, err := OfferConfirmation(rs, d.st, o)
			if err != nil {
				return nil, err
			}
			ev.SetTime(f.Now.UTC())
			d.out = append(d.out, ev)
		}
	}
	return d.out, nil
}

type decision struct {
	rs  *Rules
	st  *command.EscalationState
	f   Facts
	out []events.Event
}

func cloneState(st *command.EscalationState) *command.EscalationState {
	c := *st
	c.Offers = slices.Clone(st.Offers)
	c.Escalations = slices.Clone(st.Escalations)
	return &c
}

// add appends an event of the escalation and folds it into the state.
func (d *decision) add(t events.Type, id string, data any) error {
	ev, err := events.NewEvent(t, d.st.ID, id, Source, data)
	if err != nil {
		return err
	}
	ev.SetTime(d.f.Now.UTC())
	return d.fold(ev)
}

func (d *decision) fold(ev events.Event) error {
	if err := escalation.Apply(d.st, &ev, d.st.Seq); err != nil {
		return err
	}
	d.out = append(d.out, ev)
	return nil
}

// requestedEvent is escalation id's request event at now: the request
// command may write it before anything is decided, Decide writes the same.
func requestedEvent(id string, req events.EscalationRequestedData, now time.Time) (events.Event, error) {
	ev, err := events.NewEvent(events.EscalationRequested, id, id+"/requested", Source, req)
	if err != nil {
		return ev, err
	}
	ev.SetTime(now.UTC())
	return ev, nil
}

func (d *decision) decide(decision, method, by, channel, reason string, votes []events.EscalationVote) error {
	var sg *events.Safeguards
	if decision == events.EscalationApproved && d.st.Routed != nil && d.st.Routed.Safeguards.Any() {
		sg = d.st.Routed.Safeguards
	}
	data := events.EscalationDecidedData{Decision: decision, Method: method, By: by, Channel: channel, Votes: votes, Safeguards: sg, Reason: reason,
		HeldMS: float64(d.f.Now.Sub(d.st.RequestedAt).Microseconds()) / 1000, Operation: d.st.Request.Operation, Scope: d.st.Request.Scope, Environment: d.st.Request.Environment}
	if d.st.Routed != nil {
		data.Critical = d.st.Routed.Critical
	}
	if data.HeldMS < 0 {
		data.HeldMS = 0
	}
	// The offer it decides on: the open one (an answer, or the last
	// tier's timeout), none when it was passed over on the way here.
	if o := d.open(); o != nil && method != events.EscMethodRule && method != events.EscMethodCache {
		data.ConfirmID, data.Tier = o.ConfirmID, o.Tier
	}
	return d.add(events.EscalationDecided, d.st.ID+"/decided", data)
}

// target is the tier the request is at: the routed tier, then each
// escalation's; "" after the last tier.
func (d *decision) target() string {
	if n := len(d.st.Escalations); n > 0 {
		return d.st.Escalations[n-1].ToTier
	}
	return d.st.Routed.Tier
}

// open is the offer awaiting an answer, nil if the target tier has none.
func (d *decision) open() *events.EscalationOfferedData {
	o := escalation.CurrentOffer(d.st)
	if o == nil || o.EscalationCount != len(d.st.Escalations) {
		return nil
	}
	return o
}

// answer acts on the answer of the open offer; an answer of an older
// offer changes nothing.
func (d *decision) answer(c Cause) error {
	o := d.open()
	if o == nil || o.ConfirmID != c.ConfirmID {
		return nil
	}
	idx := d.rs.tierIndex(o.Tier)
	last := idx < 0 || idx == len(d.rs.Tiers)-1
	choice, by, channel, method := "", Actor, "", events.MethodTimeout
	if c.Answer != nil {
		choice, by, channel, method = c.Answer.Choice, c.Answer.By, c.Answer.Channel, c.Answer.Method
	}
	if c.Expired || method == events.MethodTimeout {
		if last {
			return d.finalAction(fmt.Sprintf("nobody in %s answered within %s", o.Tier, time.Duration(o.TimeoutS*float64(time.Second))))
		}
		return d.escalate(o.Tier, idx, events.EscalateTimeout, fmt.Sprintf("nobody in %s answered within %s", o.Tier, time.Duration(o.TimeoutS*float64(time.Second))), o.ConfirmID, nil, "")
	}
	if method == events.MethodError {
		// The router could not offer it and answered with the safest
		// option: nobody decided, and nothing is learned from it.
		return d.decide(events.EscalationDenied, events.EscMethodFinalAction, Actor, "", "the offer could not be asked: "+c.Answer.Reason, nil)
	}
	switch choice {
	case ChoiceApprove:
		return d.decide(events.EscalationApproved, events.MethodUser, by, channel, c.Answer.Reason, c.Votes)
	case ChoiceDeny:
		return d.decide(events.EscalationDenied, events.MethodUser, by, channel, c.Answer.Reason, c.Votes)
	case ChoiceEscalate:
		if last {
			return d.finalAction(by + " passed it on from the last tier")
		}
		return d.escalate(o.Tier, idx, events.EscalatePassed, by+" passed it on", o.ConfirmID, nil, by)
	}
	return nil
}

func (d *decision) escalate(from string, idx int, reason, detail, confirmID string, tried []string, by string) error {
	to := ""
	if idx >= 0 && idx+1 < len(d.rs.Tiers) {
		to = d.rs.Tiers[idx+1].Name
	}
	n := len(d.st.Escalations) + 1
	return d.add(events.EscalationEscalated, fmt.Sprintf("%s/escalated/%d", d.st.ID, n), events.EscalationEscalatedData{
		FromTier: from, ToTier: to, EscalationCount: n, Reason: reason, Detail: detail, ConfirmID: confirmID, Tried: tried, By: by})
}

func (d *decision) finalAction(why string) error {
	action := d.rs.FinalAction.Other
	if d.st.Routed.Critical {
		action = d.rs.FinalAction.Critical
	}
	decision := events.EscalationDenied
	if action == ActionApprove {
		decision = events.EscalationApproved
	}
	return d.decide(decision, events.EscMethodFinalAction, Actor, "", "final action "+action+": "+why, nil)
}

// advance offers the target tier unless it is offered already: an
// unreachable tier escalates at once, past the last tier the final action
// applies.
func (d *decision) advance() error {
	for d.st.Decided == nil {
		if d.open() != nil {
			return nil
		}
		tier := d.target()
		if tier == "" {
			return d.finalAction("no tier left")
		}
		idx := d.rs.tierIndex(tier)
		if idx < 0 {
			// A tier the config no longer has: past the end.
			return d.finalAction(fmt.Sprintf("tier %s is not configured", tier))
		}
		t := d.rs.Tiers[idx]
		members := d.members(t)
		if q := d.st.Routed.Quorum; q != nil && len(t.Members) > 0 && len(members) < q.Required {
			// A quorum the tier's approvers can never reach.
			if err := d.escalate(t.Name, idx, events.EscalateUnreachable, fmt.Sprintf("the quorum needs %d approvers, %s has %d who may approve", q.Required, t.Name, len(members)), "", nil, ""); err != nil {
				return err
			}
			continue
		}
		if len(t.Members) > 0 {
			ok, tried := len(members) > 0, members
			if ok && d.f.Reachable != nil {
				ok, tried = d.f.Reachable(t.Name, members)
			}
			if !ok {
				detail := "no member of " + t.Name + " is present"
				if len(members) == 0 {
					detail = "no member of " + t.Name + " is among the request's approvers"
				}
				if err := d.escalate(t.Name, idx, events.EscalateUnreachable, detail, "", tried, ""); err != nil {
					return err
				}
				continue
			}
		}
		return d.offer(t, idx, members)
	}
	return nil
}

// members of a tier who may approve: the tier's (∩ the request's
// approvers); nil for a tier open to anyone.
func (d *decision) members(t *Tier) []string {
	ids := t.MemberIDs()
	if len(d.st.Request.Approvers) == 0 {
		return ids
	}
	if len(ids) == 0 {
		return slices.Clone(d.st.Request.Approvers)
	}
	var out []string
	for _, id := range ids {
		if slices.Contains(d.st.Request.Approvers, id) {
			out = append(out, id)
		}
	}
	return out
}

func (d *decision) offer(t *Tier, idx int, members []string) error {
	n := len(d.st.Offers) + 1
	data := events.EscalationOfferedData{Tier: t.Name, TierIndex: idx, Offer: n, ConfirmID: events.ConfirmIDOfOffer(d.st.ID, n), Members: members,
		Deadline: d.f.Now.Add(t.Timeout).UTC(), TimeoutS: t.Timeout.Seconds(), EscalationCount: len(d.st.Escalations), Priority: d.st.Routed.Priority, Quorum: d.st.Routed.Quorum}
	if err := d.add(events.EscalationOffered, fmt.Sprintf("%s/offered/%d", d.st.ID, n), data); err != nil {
		return err
	}
	ev, err := OfferConfirmation(d.rs, d.st, &data)
	if err != nil {
		return err
	}
	ev.SetTime(d.f.Now.UTC())
	d.out = append(d.out, ev)
	return nil
}

// OfferConfirmation is the heed.confirm.requested of an offer: the
// question the tier's members see.
func OfferConfirmation(rs *Rules, st *command.EscalationState, o *events.EscalationOfferedData) (events.Event, error) {
	req, r := &st.Request, st.Routed
	opts := []events.Option{{Label: "Approve", Value: ChoiceApprove, Description: "let the agent do it"}, {Label: "Deny", Value: ChoiceDeny, Description: "the agent must not do it"}}
	dflt := ""
	if o.TierIndex+1 < len(rs.Tiers) {
		next := rs.Tiers[o.TierIndex+1].Name
		opts = append(opts, events.Option{Label: "Escalate", Value: ChoiceEscalate, Description: "pass it to " + next})
		dflt = ChoiceEscalate
	} else {
		dflt = ChoiceDeny
		action := rs.FinalAction.Other
		if r.Critical {
			action = rs.FinalAction.Critical
		}
		if action == ActionApprove {
			dflt = ChoiceApprove
		}
	}
	title := req.Title
	if title == "" {
		title = "Permission escalation: " + req.Operation
		if r.Critical {
			title = "CRITICAL permission escalation: " + req.Operation
		}
	}
	var b strings.Builder
	b.WriteString("PERMISSION ESCALATION REQUEST\n")
	fmt.Fprintf(&b, "Operation:   %s\n", req.Operation)
	if req.Scope != "" {
		fmt.Fprintf(&b, "Scope:       %s\n", req.Scope)
	}
	if req.Environment != "" {
		fmt.Fprintf(&b, "Environment: %s\n", req.Environment)
	}
	fmt.Fprintf(&b, "Session:     %s\n", req.Session)
	fmt.Fprintf(&b, "Risk:        %.0f%% (%s)\n", r.Risk*100, r.RiskSource)
	fmt.Fprintf(&b, "Confidence:  %.0f%%\n", r.Confidence*100)
	fmt.Fprintf(&b, "Reason:      %s\n", r.Reason)
	fmt.Fprintf(&b, "Tier:        %s (priority %d, escalation %d)\n", o.Tier, o.Priority, o.EscalationCount)
	if req.Message != "" {
		b.WriteString("\n" + req.Message + "\n")
	}
	msg := b.String()
	if len(msg) > confirmation.MaxMessageBytes {
		// The request's own message is the long part: the offer shows
		// what fits (the escalation keeps it whole).
		msg = textutil.Cut(msg, confirmation.MaxMessageBytes-len(textutil.Ellipsis)-len(" (cut)")) + " (cut)"
	}
	data := events.ConfirmRequestedData{Title: truncate(title, 200), Message: msg, Options: opts, Default: dflt, TimeoutS: o.TimeoutS,
		Requester: Source, RunID: req.RunID, Approvers: o.Members, Quorum: o.Quorum,
		Context: map[string]any{"escalation_id": st.ID, "session": req.Session, "operation": req.Operation, "scope": req.Scope, "environment": req.Environment, "risk": r.Risk, "tier": o.Tier}}
	// The channels each member uses (the tier's config): a bridge offers
	// the question to a member only on those.
	if o.TierIndex < len(rs.Tiers) {
		channels := map[string]any{}
		for _, m := range rs.Tiers[o.TierIndex].Members {
			if len(m.Channels) > 0 && slices.Contains(o.Members, m.ID) {
				channels[m.ID] = m.Channels
			}
		}
		if len(channels) > 0 {
			data.Context["channels"] = channels
		}
	}
	return events.NewEvent(events.ConfirmRequested, o.ConfirmID, o.ConfirmID+"/requested", Source, data)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Route scores a request and decides where it goes: risk rules, then the
// learned cache, then the conditional auto-approve rules, then the routing
// matrix. Every decision records its score, rule and reason.
func Route(rs *Rules, req *events.EscalationRequestedData, f Facts) (events.EscalationRoutedData, error) {
	var r events.EscalationRoutedData
	r.Risk, r.Confidence, r.RiskSource = 0.5, 0.5, events.RiskDefault
	if req.Risk != nil {
		r.Risk, r.RiskSource = *req.Risk, events.RiskFromRequest
	}
	if req.Confidence != nil {
		r.Confidence = *req.Confidence
	}
	if req.Risk == nil || req.Confidence == nil {
		for _, rule := range rs.RiskRules {
			ok, err := match(rule.prog, env(req, r.Risk, r.Confidence, false))
			if err != nil {
				return r, fmt.Errorf("risk rule %s: %w", rule.Name, err)
			}
			if !ok {
				continue
			}
			if req.Risk == nil && rule.Risk != nil {
				r.Risk, r.RiskSource = *rule.Risk, events.RiskFromRule
			}
			if req.Confidence == nil && rule.Confidence != nil {
				r.Confidence = *rule.Confidence
			}
			r.RiskRule = rule.Name
			break
		}
	}
	r.Critical = r.Risk > events.CriticalRisk
	e := env(req, r.Risk, r.Confidence, r.Critical)
	r.Quorum = req.Quorum
	for _, q := range rs.Quorum {
		ok, err := match(q.prog, e)
		if err != nil {
			return r, fmt.Errorf("quorum %s: %w", q.Name, err)
		}
		if ok {
			if r.Quorum == nil || q.Required > r.Quorum.Required {
				r.Quorum = &events.Quorum{Required: q.Required}
				if q.Veto || req.Quorum != nil && len(req.Quorum.Veto) > 0 {
					r.Quorum.Veto = []string{ChoiceDeny}
				}
			}
			break
		}
	}
	pct := func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) }
	// The learned cache: never for critical operations (config).
	if *rs.Cache.Enabled && f.Cache != nil && !(r.Critical && *rs.Cache.NeverForCritical) {
		if c := f.Cache(req.Operation, req.Environment, req.Scope); c != nil && c.Candidate {
			r.Decision = events.RouteCachedApprove
			r.Confidence = min(1, r.Confidence+c.ConfidenceBoost)
			r.Cache = &events.CacheEvidence{Count: c.Count, SuccessRate: c.SuccessRate, ConfidenceBoost: c.ConfidenceBoost}
			r.Reason = fmt.Sprintf("LEARNED: %s approved %d times with %s success (confidence +%s)", req.Operation, c.Count, pct(c.SuccessRate), pct(c.ConfidenceBoost))
			return r, nil
		}
	}
	for _, a := range rs.AutoApprove {
		if r.Risk > *a.MaxRisk || r.Confidence < *a.MinConfidence {
			continue
		}
		ok, err := match(a.prog, e)
		if err != nil {
			return r, fmt.Errorf("auto_approve rule %s: %w", a.Name, err)
		}
		if !ok {
			continue
		}
		sg := &events.Safeguards{Notes: a.Notes}
		for _, s := range a.Safeguards {
			switch s {
			case "log_extra":
				sg.LogExtra = true
			case "monitor":
				sg.Monitor = true
			case "sandbox":
				sg.Sandbox = true
			case "rollback":
				sg.Rollback = true
			}
		}
		r.Decision, r.Rule, r.Safeguards = events.RouteConditionalApprove, a.Name, sg
		r.Reason = fmt.Sprintf("SAFE: %s matches %s (risk=%s) with safeguards %s", req.Operation, a.Name, pct(r.Risk), strings.Join(a.Safeguards, ", "))
		return r, nil
	}
	for _, route := range rs.Routing {
		ok, err := match(route.prog, e)
		if err != nil {
			return r, fmt.Errorf("routing %s: %w", route.Name, err)
		}
		if !ok {
			continue
		}
		r.Decision, r.Rule, r.Priority, r.Tier = route.Decision, route.Name, route.Priority, route.Tier
		label := strings.ToUpper(strings.ReplaceAll(route.Name, "_", " "))
		if r.Critical && route.Decision == events.RouteEscalate {
			label = "CRITICAL"
		}
		switch route.Decision {
		case events.RouteEscalate:
			r.Reason = fmt.Sprintf("%s: %s (risk=%s, confidence=%s) → %s", label, req.Operation, pct(r.Risk), pct(r.Confidence), route.Tier)
		default:
			r.Reason = fmt.Sprintf("%s: %s (risk=%s, confidence=%s) → %s", label, req.Operation, pct(r.Risk), pct(r.Confidence), route.Decision)
		}
		return r, nil
	}
	r.Decision, r.Rule = events.RouteDeny, "no_route"
	r.Reason = fmt.Sprintf("no routing rule matched %s (risk=%s): denied", req.Operation, pct(r.Risk))
	return r, nil
}
