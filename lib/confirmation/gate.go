// Package confirmation is a confirmation as its events tell it, and the one
// rule every reader of the log applies to its answers:
//
//	The first valid answer in log order takes effect. An answer is valid
//	if the confirmation's request comes before it in the log, its choice is
//	one of the request's options, its run_id (if any) is the request's, and,
//	once the confirmation has expired, it is the deadline's own answer
//	(method timeout, with the default). Every other answer is refused.
//
// heed's services (runner, confirm router, indexer, learner), the CLI and
// the channels all judge answers with Gate, so they agree on which answer
// took effect whoever wrote it: heed's own command, a channel, or any
// client publishing straight to heed.confirm.<id>.answered. The confirm
// router makes each refusal visible as a heed.confirm.refused event.
package confirmation

import (
	"fmt"
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
)

// Winner is the answer that took effect.
type Winner struct {
	EventID string    `json:"event_id"`
	Seq     uint64    `json:"seq,omitempty"`
	Choice  string    `json:"choice"`
	Method  string    `json:"method"`
	By      string    `json:"by"`
	Channel string    `json:"channel,omitempty"`
	At      time.Time `json:"at"`
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
}

// Expire records the deadline. An expiry after the answer changes nothing.
func (g *Gate) Expire(d *events.ConfirmExpiredData) {
	if !g.Requested || g.Winner != nil || g.Expired {
		return
	}
	g.Expired = true
	if d.Default != "" && g.has(d.Default) {
		g.Default = d.Default
	}
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
	}
	return nil
}

// Answer judges answer a (event id, time and log position given) and, if
// it takes effect, records it as the winner.
func (g *Gate) Answer(eventID string, a *events.ConfirmAnsweredData, at time.Time, seq uint64) *Refusal {
	if r := g.Judge(a); r != nil {
		return r
	}
	g.Winner = &Winner{EventID: eventID, Seq: seq, Choice: a.Choice, Method: a.Method, By: a.By, Channel: a.Channel, At: at.UTC()}
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
