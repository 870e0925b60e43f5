package changeset

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/textutil"
	"github.com/heedhq/heed/lib/tool"
)

// MaxSummary bounds a summary (bytes).
const MaxSummary = 1000

// BuildError is a call that cannot be queued: which one and why.
type BuildError struct {
	Call   int // from 0
	Tool   string
	Reason string
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("call %d (%s): %s", e.Call+1, e.Tool, e.Reason)
}

// Items turns one wake's calls of deferred tools into change items, in
// order: a call of a batch tool (explode in its config) becomes one item
// per element of its list argument, a call of the singular tool with the
// element over the call's other args. Each item gets a summary: the
// call's own (not for exploded elements), else the tool's summary
// template, else one written from the tool and its args. Items are not
// numbered yet (Parts does that). A call of an immediate or unknown tool
// is an error: nothing is queued.
func Items(reg *tool.Registry, calls []command.ProposedCall) ([]events.ChangeItem, error) {
	var out []events.ChangeItem
	for i, c := range calls {
		spec, ok := reg.Get(c.Tool)
		if !ok {
			return nil, &BuildError{i, c.Tool, "unknown tool (not in the tools file)"}
		}
		if !spec.Deferred() {
			return nil, &BuildError{i, c.Tool, "an immediate tool is not reviewed: call it directly (review: deferred in the tools file queues it)"}
		}
		args := c.Args
		if args == nil {
			args = map[string]any{}
		}
		x := spec.Explode
		if x == nil {
			if err := spec.CheckArgs(args); err != nil {
				return nil, &BuildError{i, c.Tool, err.Error()}
			}
			out = append(out, item(spec, args, c.Summary, c.Before, "", spec.Group))
			continue
		}
		list, ok := args[x.Field].([]any)
		if !ok || len(list) == 0 {
			return nil, &BuildError{i, c.Tool, fmt.Sprintf("a batch call needs a non-empty list in args.%s", x.Field)}
		}
		one, _ := reg.Get(x.Tool)
		rest := maps.Clone(args)
		delete(rest, x.Field)
		group := spec.Group
		if group == "" {
			group = one.Group
		}
		if group == "" {
			group = c.Tool
		}
		for j, el := range list {
			a := maps.Clone(rest)
			if m, ok := el.(map[string]any); ok {
				maps.Copy(a, m)
			} else {
				a["item"] = el
			}
			if err := one.CheckArgs(a); err != nil {
				return nil, &BuildError{i, c.Tool, fmt.Sprintf("args.%s[%d]: %v", x.Field, j, err)}
			}
			out = append(out, item(one, a, "", nil, c.Tool, group))
		}
	}
	return out, nil
}

func item(spec *tool.Spec, args map[string]any, summary string, before map[string]any, from, group string) events.ChangeItem {
	if strings.TrimSpace(summary) == "" {
		var ok bool
		if summary, ok = spec.RenderSummary(args); !ok {
			summary = Describe(spec.Name, args)
		}
	}
	return events.ChangeItem{Tool: spec.Name, Args: args, Summary: textutil.Cut(strings.TrimSpace(summary), MaxSummary-len(textutil.Ellipsis)), Before: before, From: from, Group: group}
}

// Describe writes a call as the seed's history shows it:
// set_task_title("Fix login bug"), update_task_estimate(minutes=120).
// One argument is shown as its value, several as name=value in name
// order; long values are cut.
func Describe(tool string, args map[string]any) string {
	keys := slices.Sorted(maps.Keys(args))
	var parts []string
	for _, k := range keys {
		v := show(args[k])
		if len(keys) == 1 {
			parts = append(parts, v)
			continue
		}
		parts = append(parts, k+"="+v)
	}
	return textutil.Cut(tool+"("+strings.Join(parts, ", ")+")", 300)
}

func show(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = fmt.Sprintf("%q", textutil.Cut(x, 60))
	default:
		b, err := json.Marshal(x)
		if err != nil {
			s = fmt.Sprint(x)
		} else {
			s = textutil.Cut(string(b), 60)
		}
	}
	return s
}

// Parts splits items into sets of at most events.MaxChangeItems, numbered
// from 1 in each; part n has the id events.ChangeSetPartID(base, n).
func Parts(base string, items []events.ChangeItem) (ids []string, parts [][]events.ChangeItem) {
	for start := 0; start < len(items); start += events.MaxChangeItems {
		end := min(start+events.MaxChangeItems, len(items))
		part := slices.Clone(items[start:end])
		for i := range part {
			part[i].Item = i + 1
		}
		parts = append(parts, part)
		ids = append(ids, events.ChangeSetPartID(base, len(parts)))
	}
	return ids, parts
}

// Proposals are the proposed events' data of the parts of one proposal
// (ids and parts from Parts); ProposedBy defaults to the agent.
func Proposals(req *command.ProposeChangeSet, ids []string, parts [][]events.ChangeItem, expiresAt time.Time) []events.ChangeSetProposedData {
	out := make([]events.ChangeSetProposedData, len(parts))
	by := req.ProposedBy
	if strings.TrimSpace(by) == "" {
		by = req.Agent
	}
	for i, p := range parts {
		d := events.ChangeSetProposedData{Agent: req.Agent, Subject: req.Subject, Wake: req.Wake, RunID: req.RunID, Title: req.Title, Items: p,
			ExpiresAt: expiresAt.UTC().Truncate(time.Millisecond), Reviewers: req.Reviewers, ProposedBy: by}
		if len(parts) > 1 {
			d.Part, d.Parts = i+1, len(parts)
			for j, id := range ids {
				if j != i {
					d.Related = append(d.Related, id)
				}
			}
		}
		out[i] = d
	}
	return out
}
