// Package confirmation is a confirmation as its events tell it, and the one
// rule every reader of the log applies to its answers:
//
//	The first valid answer in log order takes effect. An answer is valid
//	if the confirmation's request comes before it in the log, its choice is
//	one of the request's options, its run_id (if any) is the request's, and,
//	once the confirmation has expired, it is the deadline's own answer
//	(method timeout, with the default). Every other answer is refused.
//
// Two refinements, both named by the request: approvers (only they may
// answer; the deadline's answer and the router's error answer excepted)
// and a quorum (each valid answer is a vote; an option takes effect when
// quorum.required distinct approvers have voted for it, or on its first
// vote if it is a veto). The vote that completes the quorum is the answer
// that takes effect; a second vote by the same voter is refused.
//
// heed's services (runner, confirm router, indexer, learner), the CLI and
// the channels all judge answers with Gate, so they agree on which answer
// took effect whoever wrote it: heed's own command, a channel, or any
// client publishing straight to heed.confirm.<id>.answered. The confirm
// router makes each refusal visible as a heed.confirm.refused event.
package confirmation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/textutil"
)

// Refusal codes: why an answer did not take effect.
const (
	RefusedNoRequest   = "no_request"       // the answer came before the question
	RefusedAnswered    = "already_answered" // another answer came first
	RefusedChoice      = "invalid_choice"   // the choice is not one of the options
	RefusedRunMismatch = "run_mismatch"     // the answer names another run
	RefusedExpired     = "expired"          // the deadline passed; only its default applies
	RefusedNotAllowed  = "not_allowed"      // the answerer is not one of the request's approvers
	RefusedVoted       = "already_voted"    // this answerer's vote is counted already
)

// Vote is an answer counted towards a quorum.
type Vote struct {
	EventID string    `json:"event_id,omitempty"`
	Seq     uint64    `json:"seq,omitempty"`
	Choice  string    `json:"choice"`
	By      string    `json:"by"`
	Channel string    `json:"channel,omitempty"`
	At      time.Time `json:"at"`
}

// Winner is the answer that took effect.
type Winner struct {
	EventID string    `json:"event_id"`
	Seq     uint64    `json:"seq,omitempty"`
	Choice  string    `json:"choice"`
	Method  string    `json:"method"`
	By      string    `json:"by"`
	Channel string    `json:"channel,omitempty"`
	At      time.Time `json:"at"`
	// Votes are the votes counted until this answer took effect, itself
	// included (with a quorum).
	Votes []Vote `json:"votes,omitempty"`
}

// Refusal says why an answer did not take effect, and which one did.
type Refusal struct {
	Code   string  `json:"code"`
	Reason string  `json:"reason"`
	Winner *Winner `json:"winner,omitempty"`
}

func (r *Refusal) Error() string { return r.Reason }

// Gate is the least a reader must keep of one confirmation to judge its
// answers the way every other reader does. Feed it the confirmation's
// events in log order. It is plain data, so a projection can store it.
type Gate struct {
	Requested bool     `json:"requested,omitempty"`
	RunID     string   `json:"run_id,omitempty"`
	Options   []string `json:"options,omitempty"`
	// Default is what the deadline answers.
	Default string  `json:"default,omitempty"`
	Expired bool    `json:"expired,omitempty"`
	Winner  *Winner `json:"winner,omitempty"`
	// AnyChoice: the request's options are not known to this reader (a
	// projection entry written before heed kept them): every choice is
	// taken as an option. Readers of the log never set it.
	AnyChoice bool `json:"any_choice,omitempty"`
	// Approvers, when set, are the only ones whose answers count.
	Approvers []string `json:"approvers,omitempty"`
	// Quorum, when set, makes each answer a vote.
	Quorum *events.Quorum `json:"quorum,omitempty"`
	// Votes are the votes counted so far, in log order.
	Votes []Vote `json:"votes,omitempty"`
}

// Request records the question; only the first request of an id counts.
func (g *Gate) Request(d *events.ConfirmRequestedData) {
	if g.Requested {
		return
	}
	g.Requested, g.RunID = true, d.RunID
	g.Options = make([]string, len(d.Options))
	for i, o := range d.Options {
		g.Options[i] = o.Value
	}
	if g.Default = DefaultChoice(d); !g.has(g.Default) {
		g.Default = SafeChoice(d)
	}
	g.Approvers = slices.Clone(d.Approvers)
	if d.Quorum != nil {
		q := *d.Quorum
		q.Veto = slices.Clone(q.Veto)
		g.Quorum = &q
	}
}

// Expire records the deadline. An expiry after the answer changes nothing.
func (g *Gate) Expire(d *events.ConfirmExpiredData) {
	if !g.Requested || g.Winner != nil || g.Expired {
		return
	}
	// The deadline answers with the request's default: an expiry names
	// one for its readers, but it cannot choose another (anyone who may
	// write the confirmation's subjects could pick "proceed").
	g.Expired = true
}

// Open reports whether the confirmation still takes an answer.
func (g *Gate) Open() bool { return g.Requested && g.Winner == nil }

// Judge says whether answer a, arriving now, would take effect (nil) or
// why not. It does not change the gate.
func (g *Gate) Judge(a *events.ConfirmAnsweredData) *Refusal {
	switch {
	case !g.Requested:
		return &Refusal{Code: RefusedNoRequest, Reason: "no request comes before this answer in the log"}
	case g.Winner != nil:
		w := g.Winner
		return &Refusal{Code: RefusedAnswered, Winner: w,
			Reason: fmt.Sprintf("already answered by %s at %s with %q (method %s)", w.By, w.At.UTC().Format("2006-01-02T15:04:05.000Z"), w.Choice, w.Method)}
	case a.RunID != "" && a.RunID != g.RunID:
		if g.RunID == "" {
			return &Refusal{Code: RefusedRunMismatch, Reason: fmt.Sprintf("the answer names run %s but the confirmation belongs to no run", a.RunID)}
		}
		return &Refusal{Code: RefusedRunMismatch, Reason: fmt.Sprintf("the answer names run %s but the confirmation belongs to run %s", a.RunID, g.RunID)}
	case !g.has(a.Choice):
		return &Refusal{Code: RefusedChoice, Reason: fmt.Sprintf("%q is not an option (options: %s)%s", a.Choice, strings.Join(g.Options, ", "), textutil.Hint(a.Choice, g.Options))}
	case g.Expired && (a.Method != events.MethodTimeout || a.Choice != g.Default):
		return &Refusal{Code: RefusedExpired, Reason: fmt.Sprintf("the confirmation expired; its default %q applies", g.Default)}
	case g.exempt(a):
		return nil
	case (len(g.Approvers) > 0 || g.Quorum != nil) && a.Method == events.MethodAgent:
		// An agent continues its own run (heed.cmd.run.continue): who it
		// says answered is its word alone, so it never stands for an
		// approver, nor for a voter (it could vote under every name).
		whom := "a quorum of people"
		if len(g.Approvers) > 0 {
			whom = "its approvers (" + strings.Join(g.Approvers, ", ") + ")"
		}
		return &Refusal{Code: RefusedNotAllowed, Reason: fmt.Sprintf("an agent's answer (method agent, by %s) does not count for a confirmation that names %s: people answer it (heed confirm, the console, a bridge: heed.cmd.confirm.answer)", who(a.By), whom)}
	case len(g.Approvers) > 0 && !slices.Contains(g.Approvers, a.By):
		return &Refusal{Code: RefusedNotAllowed, Reason: fmt.Sprintf("%s may not answer this confirmation: its approvers are %s", who(a.By), strings.Join(g.Approvers, ", "))}
	case g.Quorum != nil:
		if v, ok := g.voteOf(a.By); ok {
			return &Refusal{Code: RefusedVoted, Reason: fmt.Sprintf("%s has voted already (%q at %s); a vote is counted once", who(a.By), v.Choice, v.At.UTC().Format("2006-01-02T15:04:05.000Z"))}
		}
	}
	return nil
}

// Decides reports whether answer a, which Judge accepts, takes effect
// rather than only counting as a vote towards the quorum.
func (g *Gate) Decides(a *events.ConfirmAnsweredData) bool {
	if g.Quorum == nil || g.exempt(a) || slices.Contains(g.Quorum.Veto, a.Choice) {
		return true
	}
	return g.Needed(a.Choice) <= 1
}

// Needed is how many more votes choice needs to take effect (0 once an
// answer took effect, 1 without a quorum or for a veto).
func (g *Gate) Needed(choice string) int {
	if g.Winner != nil {
		return 0
	}
	if g.Quorum == nil || slices.Contains(g.Quorum.Veto, choice) {
		return 1
	}
	n := g.Quorum.Required
	for _, v := range g.Votes {
		if v.Choice == choice {
			n--
		}
	}
	return max(n, 0)
}

// exempt: the answers no approver list or quorum applies to, which end a
// confirmation nobody (allowed) answered: the deadline's own answer and
// the router's answer to a request it cannot offer (the safest option).
func (g *Gate) exempt(a *events.ConfirmAnsweredData) bool {
	switch a.Method {
	case events.MethodTimeout:
		return g.Expired && a.Choice == g.Default
	case events.MethodError:
		return a.Choice == g.safe()
	}
	return false
}

// safe is SafeChoice over the gate's options.
func (g *Gate) safe() string {
	for _, o := range g.Options {
		if IsCancel(o) {
			return o
		}
	}
	if len(g.Options) == 0 {
		return "cancel"
	}
	return g.Options[len(g.Options)-1]
}

func (g *Gate) voteOf(by string) (Vote, bool) {
	for _, v := range g.Votes {
		if v.By == by {
			return v, true
		}
	}
	return Vote{}, false
}

func who(by string) string {
	if by == "" {
		return "an answer without by"
	}
	return by
}

// Answer judges answer a (event id, time and log position given): a
// refusal, or nil when it is accepted. An accepted answer either takes
// effect (it becomes the winner: Open is false after) or, with a quorum,
// is counted as a vote and the confirmation stays open.
func (g *Gate) Answer(eventID string, a *events.ConfirmAnsweredData, at time.Time, seq uint64) *Refusal {
	if r := g.Judge(a); r != nil {
		return r
	}
	decides := g.Decides(a)
	if g.Quorum != nil && !g.exempt(a) {
		g.Votes = append(g.Votes, Vote{EventID: eventID, Seq: seq, Choice: a.Choice, By: a.By, Channel: a.Channel, At: at.UTC()})
	}
	if decides {
		g.Winner = &Winner{EventID: eventID, Seq: seq, Choice: a.Choice, Method: a.Method, By: a.By, Channel: a.Channel, At: at.UTC(), Votes: slices.Clone(g.Votes)}
	}
	return nil
}

func (g *Gate) has(v string) bool {
	if g.AnyChoice {
		return true
	}
	for _, o := range g.Options {
		if o == v {
			return true
		}
	}
	return false
}
