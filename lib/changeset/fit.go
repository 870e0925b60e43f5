package changeset

import (
	"encoding/json"

	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/textutil"
)

// MaxStateBytes is how large a set's state may be where it is stored or
// sent whole (a heed_changesets value, a status reply): under NATS's
// default max payload (1 MiB), with room for an envelope. A set's
// proposal alone may be 900 KiB, and its decisions' reasons and results
// come on top.
const MaxStateBytes = 900 << 10

// Cut lengths of Fit: what stays of an item's args and before when its
// set is too large to keep whole, and of its reason and output.
const (
	fitArgs   = 2 << 10
	fitValue  = 200
	fitReason = 500
)

// CutArgs is args in at most maxJSON bytes of JSON: each value longer
// than maxValue becomes the start of its text (the keys and the short
// values stay), or, when too many keys remain, a preview of the whole.
// It says whether it cut anything.
func CutArgs(args map[string]any, maxJSON, maxValue int) (map[string]any, bool) {
	b, err := json.Marshal(args)
	if err != nil || len(b) <= maxJSON {
		return args, false
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		vb, _ := json.Marshal(v)
		if len(vb) <= maxValue {
			out[k] = v
			continue
		}
		text, ok := v.(string)
		if !ok {
			text = string(vb)
		}
		out[k], _ = textutil.Truncate(text, maxValue)
	}
	if b, err := json.Marshal(out); err == nil && len(b) <= maxJSON {
		return out, true
	}
	p, _ := textutil.Truncate(string(b), maxJSON)
	return map[string]any{"preview": p}, true
}

// Fit makes st at most limit bytes of JSON, if it is larger, by cutting
// what only the log needs whole: each item's args and before (marked
// args_truncated), then its output and reason. The log keeps the set
// whole; the runner applies items from the log, never from a fitted copy.
// It says whether it cut anything. st must be a copy of its own (Clone).
func Fit(st *command.ChangeSetState, limit int) bool {
	if size(st) <= limit {
		return false
	}
	for i := range st.Items {
		it := &st.Items[i]
		args, a := CutArgs(it.Args, fitArgs, fitValue)
		before, b := CutArgs(it.Before, fitArgs, fitValue)
		if a || b {
			it.Args, it.Before, it.ArgsTruncated = args, before, true
		}
	}
	if size(st) <= limit {
		return true
	}
	for i := range st.Items {
		it := &st.Items[i]
		it.Reason, _ = textutil.Truncate(it.Reason, fitReason)
		if it.Output != nil {
			if b, err := json.Marshal(it.Output); err == nil && len(b) > fitArgs {
				it.Output, _ = textutil.Truncate(string(b), fitArgs)
			}
		}
		if it.Error != nil && len(it.Error.Message) > fitArgs {
			e := *it.Error
			e.Message, e.Truncated = textutil.Truncate(e.Message, fitArgs)
			it.Error = &e
		}
	}
	return true
}

func size(st *command.ChangeSetState) int {
	b, err := json.Marshal(st)
	if err != nil {
		return 0
	}
	return len(b)
}
