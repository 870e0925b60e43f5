package confirm

import (
	"fmt"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/confirmation"
)

// routeDecision is how a request is answered: at once by a layer (Answer,
// written with the id suffix Tag), or by the people layer before Deadline,
// with Then written once the deadline is (a delegation to the agent).
type routeDecision struct {
	Answer   *events.ConfirmAnsweredData
	Tag      string
	Deadline time.Time
	Then     []events.Event
	// Warnings are what the service logs: a rule that failed or answered
	// with something that is not an option.
	Warnings []string
}

// decideRoute decides how a request is answered, layer by layer: the
// --yes override, an operator rule, a learned preference (prefs looks it
// up), the run's agent (ai_assist), and otherwise people on every channel
// until the deadline, counted from requestedAt. now is when it is decided.
// A request that names its approvers or a quorum goes to people only.
// It performs no effect.
func decideRoute(cfg Config, id string, req *events.ConfirmRequestedData, requestedAt, now time.Time, prefs func(*events.ConfirmRequestedData) (readmodel.Pref, bool)) (routeDecision, error) {
	var dec routeDecision
	answer := func(a events.ConfirmAnsweredData, tag string) (routeDecision, error) {
		dec.Answer, dec.Tag = &a, tag
		return dec, nil
	}
	if problem := confirmation.Validate(req); problem != "" {
		// Nothing can be offered: answer it as an error with the safest
		// choice so whoever waits is not left hanging.
		return answer(events.ConfirmAnsweredData{Choice: confirmation.SafeChoice(req), Method: events.MethodError, By: Source, Reason: "invalid request: " + problem}, "error")
	}
	if len(req.Approvers) > 0 || req.Quorum != nil {
		// The request names who decides: no standing decision (override,
		// rule, remembered choice, agent) answers for them.
		dec.Deadline = cfg.Deadline(requestedAt, req.TimeoutS)
		return dec, nil
	}
	if req.Yes {
		return answer(events.ConfirmAnsweredData{Choice: confirmation.ProceedChoice(req), Method: events.MethodOverride, By: Source, Reason: "--yes override"}, "override")
	}
	rule, err := cfg.Rules.Match(req)
	if err != nil {
		dec.Warnings = append(dec.Warnings, "rule failed; asking people: "+err.Error())
	}
	if rule != nil && !rule.Ask {
		choice := rule.Answer
		if choice == "proceed" && !hasOption(req, "proceed") {
			choice = confirmation.ProceedChoice(req)
		}
		if hasOption(req, choice) {
			return answer(events.ConfirmAnsweredData{Choice: choice, Method: events.MethodMemory, By: Source, Reason: "rule: " + rule.Name}, "rule")
		}
		dec.Warnings = append(dec.Warnings, fmt.Sprintf("rule %s answers %q, which is not an option; asking people", rule.Name, rule.Answer))
	}
	if rule == nil && req.LearnPreference && prefs != nil {
		if p, ok := prefs(req); ok && hasOption(req, p.Choice) {
			return answer(events.ConfirmAnsweredData{Choice: p.Choice, Method: events.MethodMemory, By: Source,
				Reason: fmt.Sprintf("remembered choice %s (set by %s)", p.ID, p.By), LearnedFrom: p.LearnedFrom}, "memory")
		}
	}
	dec.Deadline = cfg.Deadline(requestedAt, req.TimeoutS)
	if req.AIAssist && req.Agent != "" {
		del, err := events.NewEvent(events.ConfirmDelegated, id, id+"/delegated", Source, events.ConfirmDelegatedData{
			Agent: req.Agent, RunID: req.RunID, Skill: req.Skill, Step: req.Step, Message: req.Message, Options: req.Options,
			Default: confirmation.DefaultChoice(req), Deadline: dec.Deadline.UTC(), Context: req.Context,
			Question: "Review the context and answer with `heed continue " + req.RunID + " --choice <value> --reason <why>`.",
		})
		if err != nil {
			return dec, err
		}
		del.SetTime(now)
		dec.Then = append(dec.Then, del)
	}
	return dec, nil
}
