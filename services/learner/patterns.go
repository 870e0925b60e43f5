package learner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
)

// PatternsProjection learns patterns from tool results.
type PatternsProjection struct{}

func (PatternsProjection) Name() string   { return "patterns" }
func (PatternsProjection) Bucket() string { return readmodel.PatternsBucket }
func (PatternsProjection) Filters() []string {
	return []string{
		"heed.run.*.step.started", "heed.run.*.step.failed", "heed.run.*.step.completed",
		// The end of a run lets go of its open calls' shapes.
		"heed.run.*.completed", "heed.run.*.failed", "heed.run.*.cancelled", "heed.run.*.abandoned",
	}
}

type callRef struct {
	Tool   string            `json:"tool"`
	Shapes map[string]string `json:"shapes"`
}

// openCalls are a run's calls awaiting their result, by step index: one key
// per run, removed when the last result arrives or the run ends (every run
// ends: the runner abandons one that goes quiet), so nothing is kept for a
// call forever.
type openCalls struct {
	Calls map[string]callRef `json:"calls"`
}

func (o *openCalls) remove(ctx context.Context, s events.Store, key string, index int) error {
	delete(o.Calls, strconv.Itoa(index))
	if len(o.Calls) == 0 {
		return s.Delete(ctx, key)
	}
	return s.Put(ctx, key, o)
}

// Apply classifies and extracts on failures, and learns confidence.
func (PatternsProjection) Apply(ctx context.Context, s events.Store, ev *events.Event) error {
	switch events.Type(ev.Type()) {
	case events.RunStepStarted:
		var d events.StepStartedData
		if json.Unmarshal(ev.Data(), &d) != nil || d.Tool == "" {
			return nil
		}
		// Remember the call's shape until its result arrives.
		var open openCalls
		if _, err := s.Get(ctx, callKey(ev.Subject()), &open); err != nil {
			return err
		}
		if open.Calls == nil {
			open.Calls = map[string]callRef{}
		}
		open.Calls[strconv.Itoa(d.Index)] = callRef{Tool: d.Tool, Shapes: readmodel.Shapes(d.Args)}
		return s.Put(ctx, callKey(ev.Subject()), open)
	case events.RunStepFailed:
		var d events.StepFailedData
		if json.Unmarshal(ev.Data(), &d) != nil || d.Tool == "" {
			return nil
		}
		kind := ClassifyUsage(d.Error)
		sig := events.ErrorSignature(d.Error.Message)
		shapes := readmodel.Shapes(d.Args)
		if kind == "infrastructure" {
			shapes = map[string]string{} // the call's args are not the cause
		}
		id := PatternID(d.Tool, sig, shapes)
		var p readmodel.Pattern
		if _, err := s.Get(ctx, id, &p); err != nil {
			return err
		}
		if p.Occurrences == 0 {
			p = readmodel.Pattern{ID: id, Tool: d.Tool, Signature: sig, Kind: kind, ArgShapes: shapes, FirstSeen: ev.Time().UTC(), LastSeen: ev.Time().UTC()}
			var idx toolIndex
			if _, err := s.Get(ctx, "tool."+d.Tool, &idx); err != nil {
				return err
			}
			if len(idx.IDs) >= maxPatternsPerTool {
				kept, err := evictPattern(ctx, s, idx.IDs)
				if err != nil {
					return err
				}
				idx.IDs = kept
			}
			idx.IDs = append(idx.IDs, id)
			if err := s.Put(ctx, "tool."+d.Tool, idx); err != nil {
				return err
			}
		}
		p.Occurrences++
		if t := ev.Time().UTC(); t.After(p.LastSeen) {
			p.LastSeen = t // the latest: an event dated in the past does not move it back
		}
		p.Confidence, p.Stage = confidence(p.Occurrences, p.Successes)
		p.Hint = hint(p)
		if err := s.Put(ctx, id, p); err != nil {
			return err
		}
		var open openCalls
		if ok, err := s.Get(ctx, callKey(ev.Subject()), &open); err != nil || !ok {
			return err
		}
		return open.remove(ctx, s, callKey(ev.Subject()), d.Index)
	case events.RunCompleted, events.RunFailed, events.RunCancelled, events.RunAbandoned:
		return s.Delete(ctx, callKey(ev.Subject()))
	case events.RunStepCompleted:
		var d events.StepCompletedData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return nil
		}
		var open openCalls
		ok, err := s.Get(ctx, callKey(ev.Subject()), &open)
		if err != nil || !ok {
			return err
		}
		c, ok := open.Calls[strconv.Itoa(d.Index)]
		if !ok {
			return nil
		}
		// A success of the same call shape weakens every pattern of that shape.
		// (Only patterns recorded under the tool's keys are visited: the
		// projection keeps an index per tool.)
		var idx toolIndex
		if _, err := s.Get(ctx, "tool."+c.Tool, &idx); err != nil {
			return err
		}
		for _, id := range idx.IDs {
			var p readmodel.Pattern
			ok, err := s.Get(ctx, id, &p)
			if err != nil || !ok || p.Kind != "usage" || !sameShapes(p.ArgShapes, c.Shapes) {
				continue
			}
			p.Successes++
			p.Confidence, p.Stage = confidence(p.Occurrences, p.Successes)
			if err := s.Put(ctx, id, p); err != nil {
				return err
			}
		}
		return open.remove(ctx, s, callKey(ev.Subject()), d.Index)
	}
	return nil
}

type toolIndex struct {
	IDs []string `json:"ids"`
}

// maxPatternsPerTool bounds a tool's patterns: each success of the tool
// reads them all, and a flood of failures with made-up arg shapes made
// one tool's index grow without end and its successes crawl.
const maxPatternsPerTool = 64

// evictPattern removes the tool's least seen pattern (fewest occurrences,
// then seen longest ago, then its id: from the patterns alone, so that a
// replay removes the same one) and returns the ids left.
func evictPattern(ctx context.Context, s events.Store, ids []string) ([]string, error) {
	worst, worstAt := -1, readmodel.Pattern{}
	for i, id := range ids {
		var p readmodel.Pattern
		ok, err := s.Get(ctx, id, &p)
		if err != nil {
			return nil, err
		}
		if !ok {
			worst = i // gone already: its slot is free
			break
		}
		if worst < 0 || p.Occurrences < worstAt.Occurrences ||
			(p.Occurrences == worstAt.Occurrences && (p.LastSeen.Before(worstAt.LastSeen) || (p.LastSeen.Equal(worstAt.LastSeen) && id < ids[worst]))) {
			worst, worstAt = i, p
		}
	}
	if err := s.Delete(ctx, ids[worst]); err != nil {
		return nil, err
	}
	return append(ids[:worst:worst], ids[worst+1:]...), nil
}

// callKey holds a run's open calls' shapes between start and result.
func callKey(run string) string { return "call." + run }

// PatternID names a pattern.
func PatternID(tool, signature string, shapes map[string]string) string {
	keys := make([]string, 0, len(shapes))
	for k := range shapes {
		keys = append(keys, k+"="+shapes[k])
	}
	sort.Strings(keys)
	h := sha256.Sum256([]byte(tool + "\x00" + signature + "\x00" + strings.Join(keys, ",")))
	return "pat-" + hex.EncodeToString(h[:10])
}

// confidence maps recurrences and contradicting successes to a confidence
// and a stage.
func confidence(occurrences, successes int) (float64, string) {
	c := 0.0
	switch {
	case occurrences >= 5:
		c = 0.85
	case occurrences == 4:
		c = 0.75
	case occurrences == 3:
		c = 0.55
	case occurrences == 2:
		c = 0.4
	default:
		c = 0.2
	}
	c -= 0.15 * float64(successes)
	if c < 0 {
		c = 0
	}
	c = round3(c)
	stage := "new"
	switch {
	case c >= readmodel.ActiveConfidence:
		stage = "high"
	case c >= 0.5:
		stage = "medium"
	case c >= 0.3:
		stage = "low"
	}
	return c, stage
}

// ClassifyUsage says whether a failure is about the call (usage: bad args,
// not found) or about the world (infrastructure: network, auth).
func ClassifyUsage(e events.ErrorInfo) string {
	m := strings.ToLower(e.Message)
	for _, w := range []string{"connection refused", "no route to host", "timeout", "timed out", "unauthorized", "forbidden", "401", "403", "token expired", "network", "dial tcp", "quota"} {
		if strings.Contains(m, w) {
			return "infrastructure"
		}
	}
	if e.Kind == "timeout" || e.Kind == "unavailable" {
		return "infrastructure"
	}
	return "usage"
}

func hint(p readmodel.Pattern) string {
	var parts []string
	for k, v := range p.ArgShapes {
		parts = append(parts, k+" is "+v)
	}
	sort.Strings(parts)
	when := ""
	if len(parts) > 0 {
		when = " when " + strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%s failed %d times with %q%s", p.Tool, p.Occurrences, p.Signature, when)
}

func sameShapes(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
