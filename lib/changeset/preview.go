package changeset

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/heedhq/heed/events/command"
)

// Change is one field of an item as before → after.
type Change struct{ Field, Before, After string }

// Preview is an item's before → after, for the fields its proposal says
// what it saw of (Before) that its args change, in field order.
func Preview(it *command.ChangeItemState) []Change {
	var out []Change
	for k, was := range it.Before {
		if now, ok := it.Args[k]; ok {
			out = append(out, Change{k, Show(was), Show(now)})
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Field, b.Field) })
	return out
}

// Show is a value as a person reads it: a string as is, nothing as —,
// anything else as JSON.
func Show(v any) string {
	switch x := v.(type) {
	case nil:
		return "—"
	case string:
		if x == "" {
			return "—"
		}
		return x
	}
	b, _ := json.Marshal(v)
	return string(b)
}
