package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// summarizeEscalation is one readable line for an escalation's event
// (heed audit): ok is false for any other event.
func summarizeEscalation(ev *events.Event) (string, bool) {
	var parts []string
	add := func(label, v string) {
		if v != "" {
			parts = append(parts, label+v)
		}
	}
	num := func(f float64) string { return fmt.Sprintf("%.2f", f) }
	switch events.Type(ev.Type()) {
	case events.EscalationRequested:
		var d events.EscalationRequestedData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return "", false
		}
		add("session ", d.Session)
		add("operation ", d.Operation)
		add("scope ", d.Scope)
		add("env ", d.Environment)
		if d.Risk != nil {
			add("risk ", num(*d.Risk))
		}
		if d.Confidence != nil {
			add("confidence ", num(*d.Confidence))
		}
		add("by ", d.Requester)
		add("run ", d.RunID)
		add("approvers ", strings.Join(d.Approvers, ","))
		add("quorum ", quorumText(d.Quorum))
	case events.EscalationRouted:
		var d events.EscalationRoutedData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return "", false
		}
		add("", d.Decision)
		src := d.RiskSource
		if d.RiskRule != "" {
			src += " " + d.RiskRule
		}
		add("risk ", num(d.Risk)+" ("+src+")")
		if d.Critical {
			parts = append(parts, "CRITICAL")
		}
		add("confidence ", num(d.Confidence))
		add("rule ", d.Rule)
		add("reason ", d.Reason)
		if d.Priority > 0 {
			add("priority ", fmt.Sprint(d.Priority))
		}
		add("tier ", d.Tier)
		add("safeguards ", safeguardsText(d.Safeguards))
		if c := d.Cache; c != nil {
			add("cache ", fmt.Sprintf("%d decisions, %.0f%% success, boost %.2f", c.Count, c.SuccessRate*100, c.ConfidenceBoost))
		}
		add("quorum ", quorumText(d.Quorum))
	case events.EscalationOffered:
		var d events.EscalationOfferedData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return "", false
		}
		add("offer ", fmt.Sprintf("%d to tier %s", d.Offer, d.Tier))
		add("confirmation ", d.ConfirmID)
		add("members ", strings.Join(d.Members, ","))
		add("deadline ", d.Deadline.Local().Format("15:04:05")+" ("+(time.Duration(d.TimeoutS*float64(time.Second))).String()+")")
		add("escalation ", fmt.Sprint(d.EscalationCount))
		if d.Priority > 0 {
			add("priority ", fmt.Sprint(d.Priority))
		}
		add("quorum ", quorumText(d.Quorum))
	case events.EscalationEscalated:
		var d events.EscalationEscalatedData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return "", false
		}
		to := d.ToTier
		if to == "" {
			to = "(final action)"
		}
		add("", d.FromTier+" → "+to)
		add("reason ", d.Reason)
		add("escalation ", fmt.Sprint(d.EscalationCount))
		add("confirmation ", d.ConfirmID)
		add("tried ", strings.Join(d.Tried, ","))
		add("by ", d.By)
		add("", d.Detail)
	case events.EscalationDecided:
		var d events.EscalationDecidedData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return "", false
		}
		add("", d.Decision)
		add("method ", d.Method)
		add("by ", d.By)
		add("on ", d.Channel)
		add("tier ", d.Tier)
		add("confirmation ", d.ConfirmID)
		var votes []string
		for _, v := range d.Votes {
			votes = append(votes, v.Choice+" by "+v.By)
		}
		add("votes ", strings.Join(votes, ", "))
		add("safeguards ", safeguardsText(d.Safeguards))
		add("reason ", d.Reason)
		add("held ", (time.Duration(d.HeldMS * float64(time.Millisecond))).Round(time.Millisecond).String())
	case events.EscalationOutcome:
		var d events.EscalationOutcomeData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return "", false
		}
		add("", d.Outcome)
		add("by ", d.By)
		add("", d.Detail)
	default:
		return "", false
	}
	return strings.Join(parts, "  "), true
}

// offerRequestSummary is the line of an escalation offer's confirmation
// request: who may answer and until when, rather than the message's
// first line (always the same banner).
func offerRequestSummary(ev *events.Event) (string, bool) {
	if events.Type(ev.Type()) != events.ConfirmRequested {
		return "", false
	}
	var d events.ConfirmRequestedData
	if json.Unmarshal(ev.Data(), &d) != nil {
		return "", false
	}
	escID, n, ok := events.OfferOfConfirmID(ev.Subject())
	if !ok || d.Context["escalation_id"] != escID {
		return "", false
	}
	parts := []string{fmt.Sprintf("offer %d of %s", n, escID)}
	if tier, _ := d.Context["tier"].(string); tier != "" {
		parts = append(parts, "tier "+tier)
	}
	if len(d.Approvers) > 0 {
		parts = append(parts, "approvers "+strings.Join(d.Approvers, ","))
	}
	if q := quorumText(d.Quorum); q != "" {
		parts = append(parts, "quorum "+q)
	}
	if d.TimeoutS > 0 {
		parts = append(parts, "timeout "+(time.Duration(d.TimeoutS*float64(time.Second))).String())
	}
	if d.Default != "" {
		parts = append(parts, "default "+d.Default)
	}
	return strings.Join(parts, "  "), true
}

func safeguardsText(s *events.Safeguards) string {
	if !s.Any() {
		return ""
	}
	var out []string
	for _, x := range []struct {
		on   bool
		name string
	}{{s.LogExtra, "log_extra"}, {s.Monitor, "monitor"}, {s.Sandbox, "sandbox"}, {s.Rollback, "rollback"}} {
		if x.on {
			out = append(out, x.name)
		}
	}
	if s.Notes != "" {
		out = append(out, fmt.Sprintf("%q", s.Notes))
	}
	return strings.Join(out, ",")
}

func quorumText(q *events.Quorum) string {
	if q == nil {
		return ""
	}
	out := fmt.Sprintf("%d", q.Required)
	if len(q.Veto) > 0 {
		out += ", veto " + strings.Join(q.Veto, ",")
	}
	return out
}

// escalationHeader is the audit's heading for an escalation's index entry.
func escalationHeader(x readmodel.IndexEntry) string {
	var parts []string
	if x.Operation != "" {
		parts = append(parts, "operation "+x.Operation)
	}
	if x.Scope != "" {
		parts = append(parts, "scope "+x.Scope)
	}
	if x.Session != "" {
		parts = append(parts, "session "+x.Session)
	}
	if x.Outcome != "" {
		parts = append(parts, "outcome "+x.Outcome)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// printEscalationEntry prints an escalation's index entry (heed status).
func printEscalationEntry(out io.Writer, pal palette, x readmodel.IndexEntry) {
	fmt.Fprintf(out, "escalation %s: %s\n", x.ID, pal.status(x.Status))
	row := func(label, v string) {
		if v != "" {
			fmt.Fprintf(out, "  %-12s %s\n", label, v)
		}
	}
	row("session", x.Session)
	row("operation", x.Operation)
	row("scope", x.Scope)
	if x.Risk != nil {
		risk := fmt.Sprintf("%.2f", *x.Risk)
		if x.Critical {
			risk += " (critical)"
		}
		row("risk", risk)
	}
	row("route", x.Route)
	if x.Priority > 0 {
		row("priority", fmt.Sprint(x.Priority))
	}
	row("tier", x.Tier)
	row("offer", x.ConfirmID)
	if x.EscalationCount > 0 {
		row("escalated", fmt.Sprintf("%d times", x.EscalationCount))
	}
	if x.Method != "" {
		row("decided", strings.TrimSpace(fmt.Sprintf("by %s (%s) %s", x.By, x.Method, x.Channel)))
	}
	row("outcome", x.Outcome)
	fmt.Fprintf(out, "  %-12s %d, %s → %s\n", "events", x.Count, x.First.Time.Local().Format("2006-01-02 15:04:05"), x.Last.Time.Local().Format("15:04:05"))
}
