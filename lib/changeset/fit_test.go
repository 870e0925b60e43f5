package changeset_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/changeset"
)

// A set at the limits (a 900 KiB proposal, every item decided with a
// 4,000-byte reason and applied with a 16 KiB output) is fitted under
// MaxStateBytes; the original is untouched; a small set is left alone.
func TestFit(t *testing.T) {
	doc := strings.Repeat("z", 88<<10)
	st := changeset.New("cs-fit")
	for i := range events.MaxChangeItems {
		st.Items = append(st.Items, command.ChangeItemState{
			ChangeItem: events.ChangeItem{Item: i + 1, Tool: "put_doc", Args: map[string]any{"name": "doc", "body": doc}, Before: map[string]any{"body": "old"}},
			Status:     events.VerdictConfirmed, Reason: strings.Repeat("r", 4000), Apply: events.ApplyApplied, Output: strings.Repeat("o", 16<<10),
		})
	}
	whole, _ := json.Marshal(st)
	if len(whole) <= changeset.MaxStateBytes {
		t.Fatalf("the set is %d bytes: not over the limit", len(whole))
	}
	cp := changeset.Clone(st)
	if !changeset.Fit(cp, changeset.MaxStateBytes) {
		t.Fatal("Fit cut nothing")
	}
	fitted, _ := json.Marshal(cp)
	if len(fitted) > changeset.MaxStateBytes {
		t.Errorf("fitted: %d bytes", len(fitted))
	}
	it := cp.Items[0]
	if !it.ArgsTruncated || it.Args["name"] != "doc" || len(it.Args["body"].(string)) > 210 || it.Before["body"] != "old" {
		t.Errorf("item 1 fitted: truncated %v, args %.80v", it.ArgsTruncated, it.Args)
	}
	if after, _ := json.Marshal(st); string(after) != string(whole) {
		t.Error("Fit changed the original")
	}
	small := changeset.New("cs-small")
	small.Items = []command.ChangeItemState{{ChangeItem: events.ChangeItem{Item: 1, Tool: "t", Args: map[string]any{"body": doc}}}}
	if changeset.Fit(small, changeset.MaxStateBytes) || small.Items[0].ArgsTruncated {
		t.Error("Fit cut a set under the limit")
	}
}
