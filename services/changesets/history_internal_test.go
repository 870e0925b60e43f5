package changesets

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
)

// The history keeps small args whole, large ones as a preview, and drops
// its oldest records while it is above maxHistoryBytes (records with long
// reasons and summaries only: 200 of them pass 1 MiB).
func TestHistoryFitsInAValue(t *testing.T) {
	small := map[string]any{"title": "x"}
	if got, cut := historyArgs(small); cut || got["title"] != "x" {
		t.Errorf("small args: %v, %v", got, cut)
	}
	if got, cut := historyArgs(map[string]any{"body": strings.Repeat("é", 5000)}); !cut || len(got["preview"].(string)) > maxHistoryArgs+8 {
		t.Errorf("large args: cut %v, preview of %d bytes", cut, len(got["preview"].(string)))
	}
	var recs []command.ChangeDecisionRecord
	for i := range readmodel.MaxAgentDecisions {
		recs = append(recs, command.ChangeDecisionRecord{Set: "s", Item: i + 1, Summary: strings.Repeat("s", 1000), Reason: strings.Repeat("r", 4096), Args: small})
	}
	fit := fitHistory(recs)
	b, _ := json.Marshal(readmodel.AgentDecisions{Agent: "a", Decisions: fit})
	if len(b) > maxHistoryBytes+1024 || len(fit) == len(recs) || fit[len(fit)-1].Item != readmodel.MaxAgentDecisions {
		t.Errorf("fit: %d of %d records, %d bytes, newest %d", len(fit), len(recs), len(b), fit[len(fit)-1].Item)
	}
	if len(fitHistory(recs[:10])) != 10 {
		t.Error("a small history lost records")
	}
}
