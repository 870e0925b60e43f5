package changesets

import (
	"encoding/json"
	"fmt"
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
	// One long value: cut, the other keys kept.
	got, cut := historyArgs(map[string]any{"title": "t", "body": strings.Repeat("é", 5000), "n": 3.0})
	if body, _ := got["body"].(string); !cut || got["title"] != "t" || got["n"] != 3.0 || len(body) > maxHistoryValue+8 {
		t.Errorf("one long value: cut %v, args %.100v", cut, got)
	}
	// Too many keys for that: the whole as a preview.
	many := map[string]any{}
	for i := range 300 {
		many[fmt.Sprintf("key%03d", i)] = strings.Repeat("v", 30)
	}
	got, cut = historyArgs(many)
	if p, _ := got["preview"].(string); !cut || len(got) != 1 || len(p) > maxHistoryArgs+8 {
		t.Errorf("300 keys: cut %v, %d keys", cut, len(got))
	}
	var recs []command.ChangeDecisionRecord
	for i := range readmodel.MaxAgentDecisions {
		recs = append(recs, command.ChangeDecisionRecord{Set: "s", Item: i + 1, Summary: strings.Repeat("s", 1000), Reason: strings.Repeat("r", 4096), Args: small})
	}
	fit := fitHistory(recs)
	b, err := historyJSON(readmodel.AgentDecisions{Agent: "a", Decisions: recs})
	if err != nil {
		t.Fatal(err)
	}
	var written readmodel.AgentDecisions
	if err := json.Unmarshal(b, &written); err != nil || len(written.Decisions) != len(fit) {
		t.Fatalf("written: %d records (%v), fitHistory keeps %d", len(written.Decisions), err, len(fit))
	}
	if len(b) > maxHistoryBytes+1024 || len(fit) == len(recs) || fit[len(fit)-1].Item != readmodel.MaxAgentDecisions {
		t.Errorf("fit: %d of %d records, %d bytes, newest %d", len(fit), len(recs), len(b), fit[len(fit)-1].Item)
	}
	if len(fitHistory(recs[:10])) != 10 {
		t.Error("a small history lost records")
	}
}
