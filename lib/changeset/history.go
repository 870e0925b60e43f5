package changeset

import (
	"fmt"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/textutil"
)

// History defaults: the seed's context budget.
const (
	DefaultHistoryLimit  = 20
	DefaultHistoryBudget = 500
	// BytesPerToken is how a budget in tokens is counted: about four
	// bytes of English text a token, the usual rule of thumb; an agent
	// with a tokenizer of its own can ask for a smaller budget.
	BytesPerToken = 4
)

// historyHeader opens the text an agent puts in its prompt (the seed's
// "Recent User Decisions" section).
const historyHeader = "## Recent User Decisions\n\n" +
	"The following shows how the user responded to your recent suggestions.\n" +
	"Learn from rejections — avoid repeating rejected patterns.\n\n"

// Tokens estimates the tokens of s.
func Tokens(s string) int { return (len(s) + BytesPerToken - 1) / BytesPerToken }

// HistoryLine is one decision as the agent reads it:
//
//	✓ set_task_title("Fix login bug") — confirmed
//	✗ update_task_estimate(minutes=120) — rejected (reason: "I know better")
//	⏸ set_task_priority("P2") — deferred
//	– add_checklist_item("Deploy") — no decision (expired)
func HistoryLine(r command.ChangeDecisionRecord) string {
	mark, what := "–", "no decision (expired)"
	switch r.Verdict {
	case events.VerdictConfirmed:
		mark, what = "✓", "confirmed"
		switch {
		case r.Applied == events.ApplyFailed && r.Stale:
			what = "confirmed, not applied (stale): " + oneLine(r.Error, 160)
		case r.Applied == events.ApplyFailed:
			what = "confirmed, failed: " + oneLine(r.Error, 160)
		}
	case events.VerdictRejected:
		mark, what = "✗", "rejected"
	case events.VerdictDeferred:
		mark, what = "⏸", "deferred"
	}
	if r.Reason != "" {
		what += fmt.Sprintf(" (reason: %q)", oneLine(r.Reason, 200))
	}
	return "- " + mark + " " + Describe(r.Tool, r.Args) + " — " + what
}

// History selects and formats an agent's decisions (newest first in
// records) for its next wake: at most limit, and as many as fit in budget
// tokens with the header. omitted counts those left out.
func History(records []command.ChangeDecisionRecord, limit, budget int) (text string, used []command.ChangeDecisionRecord, omitted int) {
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	if budget <= 0 {
		budget = DefaultHistoryBudget
	}
	var b strings.Builder
	b.WriteString(historyHeader)
	if len(records) == 0 {
		b.WriteString("- (no decisions yet)\n")
		return b.String(), nil, 0
	}
	for i, r := range records {
		line := HistoryLine(r) + "\n"
		if i >= limit || Tokens(b.String()+line) > budget {
			omitted = len(records) - i
			break
		}
		b.WriteString(line)
		used = append(used, r)
	}
	return b.String(), used, omitted
}

func oneLine(s string, limit int) string {
	return textutil.Cut(strings.Join(strings.Fields(s), " "), limit)
}
