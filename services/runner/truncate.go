package runner

import (
	"encoding/json"

	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/textutil"
)

// maxFieldBytes bounds one output, args or error in an event: the log
// keeps what an operator needs to see, not whole payloads. maxFieldDepth
// bounds its nesting, so the event stays within events.MaxJSONDepth.
const (
	maxFieldBytes = 16 * 1024
	maxFieldDepth = events.MaxJSONDepth - 16
)

// truncateValue returns v, or a string preview of its JSON when larger than
// max.
func truncateValue(v any, max int) (any, bool) {
	if v == nil {
		return nil, false
	}
	if s, ok := v.(string); ok {
		return truncateString(s, max)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, true
	}
	if len(b) <= max && events.JSONDepth(b, maxFieldDepth) <= maxFieldDepth {
		return v, false
	}
	p, _ := truncateString(string(b), max)
	return p, true
}

// truncateMap is truncateValue for objects: a too-large map becomes
// {"preview": "<json…>"}.
func truncateMap(m map[string]any, max int) (map[string]any, bool) {
	if m == nil {
		return nil, false
	}
	b, err := json.Marshal(m)
	if err != nil {
		return map[string]any{"preview": "(not JSON)"}, true
	}
	if len(b) <= max && events.JSONDepth(b, maxFieldDepth) <= maxFieldDepth {
		return m, false
	}
	p, _ := truncateString(string(b), max)
	return map[string]any{"preview": p}, true
}

func truncateString(s string, max int) (string, bool) { return textutil.Truncate(s, max) }

// jsonable normalizes an expression result to JSON-shaped data.
func jsonable(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

func firstLine(s string, max int) string { return textutil.FirstLine(s, max) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// msBetween is the time from start to end in milliseconds (0 without a
// start).
func msBetween(start, end time.Time) float64 {
	if start.IsZero() {
		return 0
	}
	return ms(end.Sub(start))
}
