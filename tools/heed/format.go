package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/textutil"
)

// summarize renders an event's data as one readable phrase.
func summarize(ev *events.Event) string {
	var d map[string]any
	if err := json.Unmarshal(ev.Data(), &d); err != nil || d == nil {
		return compact(ev.Data(), 160)
	}
	s := func(k string) string {
		if v, ok := d[k]; ok && v != nil {
			switch x := v.(type) {
			case string:
				return x
			case float64:
				return fmt.Sprint(x)
			case bool:
				return fmt.Sprint(x)
			}
			b, _ := json.Marshal(v)
			return string(b)
		}
		return ""
	}
	var parts []string
	add := func(label, v string) {
		if v != "" {
			parts = append(parts, label+v)
		}
	}
	switch events.Type(ev.Type()) {
	case events.RunRequested:
		if sk, ok := d["skill"].(map[string]any); ok {
			add("skill ", fmt.Sprint(sk["name"]))
		}
		add("inputs ", s("inputs"))
		if s("yes") == "true" {
			parts = append(parts, "--yes")
		}
		add("by ", s("requested_by"))
	case events.RunStarted:
		add("skill ", s("skill"))
		add("driver ", s("driver"))
	case events.RunStepStarted:
		add("", s("step"))
		add("#", s("attempt"))
		add("tool ", s("tool"))
		add("args ", truncate(s("args"), 100))
	case events.RunStepCompleted:
		add("", s("step"))
		add("#", s("attempt"))
		add("→ ", truncate(s("output"), 100))
		add("in ", msDuration(d["duration_ms"]))
	case events.RunStepFailed:
		add("", s("step"))
		add("#", s("attempt"))
		if e, ok := d["error"].(map[string]any); ok {
			add("error: ", truncate(fmt.Sprint(e["message"]), 160))
		}
	case events.RunStepSkipped:
		add("", s("step"))
		add("", s("reason"))
	case events.RunPaused:
		add("", s("reason"))
		add("at ", s("step"))
		add("confirmation ", s("confirm_id"))
	case events.RunResumed:
		add("at ", s("step"))
		add("choice ", s("choice"))
		add("method ", s("method"))
		add("by ", s("by"))
	case events.RunCompleted:
		add("", truncate(s("summary"), 160))
	case events.RunFailed:
		add("at ", s("step"))
		if e, ok := d["error"].(map[string]any); ok {
			add("error: ", truncate(fmt.Sprint(e["message"]), 160))
		}
	case events.RunCancelled:
		add("by ", s("by"))
		add("", s("reason"))
	case events.RunAbandoned:
		add("", s("reason"))
	case events.ConfirmRequested:
		add("", truncate(firstLine(s("message")), 100))
		add("run ", s("run_id"))
		add("default ", s("default"))
	case events.ConfirmAnswered:
		add("choice ", s("choice"))
		add("method ", s("method"))
		add("by ", s("by"))
		add("on ", s("channel"))
		add("reason ", s("reason"))
	case events.ConfirmRefused:
		add("answer ", s("answer_id"))
		add("by ", s("by"))
		add("", s("code"))
		if w, ok := d["winner"].(map[string]any); ok {
			add("winner ", fmt.Sprintf("%v by %v", w["choice"], w["by"]))
		}
	case events.ConfirmExpired:
		add("deadline ", s("deadline"))
		add("default ", s("default"))
	case events.ConfirmDelegated:
		add("to ", s("agent"))
		add("run ", s("run_id"))
	case events.RunWarning:
		add("", s("step"))
		add("", s("message"))
	case events.HealTriggered:
		add("", s("step"))
		add("#", s("attempt"))
		if c, ok := d["classification"].(map[string]any); ok {
			add("class ", fmt.Sprint(c["kind"]))
		}
		add("plan ", s("plan"))
		if f, ok := d["fix"].(map[string]any); ok {
			if f["tool"] != nil {
				add("fix ", fmt.Sprint(f["tool"]))
			}
			if f["fix_id"] != nil {
				add("learned ", fmt.Sprint(f["fix_id"]))
			}
		}
	case events.HealFixApplied:
		add("", s("step"))
		if f, ok := d["fix"].(map[string]any); ok && f["tool"] != nil {
			add("ran ", fmt.Sprint(f["tool"]))
		}
		add("ok ", s("ok"))
	case events.HealRetried:
		add("", s("step"))
		add("→ attempt ", s("next_attempt"))
		add("args ", truncate(s("args"), 100))
	case events.HealHealed:
		add("", s("step"))
		add("#", s("attempt"))
		add("via ", s("via"))
	case events.HealGaveUp:
		add("", s("step"))
		add("", s("reason"))
	case events.HealEscalated:
		add("", s("step"))
		add("to ", s("agent"))
	case events.PrefSet:
		add("", s("scope"))
		add("", s("skill"))
		add("", s("step"))
		add("→ ", s("choice"))
		add("by ", s("by"))
	case events.PrefForgotten, events.FixForgotten:
		add("by ", s("by"))
	case events.FixLearned:
		add("", s("tool"))
		add("", s("error_pattern"))
		add("→ ", s("description"))
		add("from ", s("source"))
	case events.ChangeSetProposed:
		add("by ", s("agent"))
		add("on ", s("subject"))
		if items, ok := d["items"].([]any); ok {
			add("", fmt.Sprintf("%d %s", len(items), plural(len(items), "item", "items")))
		}
		add("expires ", s("expires_at"))
	case events.ChangeSetDecided:
		if decs, ok := d["decisions"].([]any); ok {
			var ds []string
			for _, x := range decs {
				if m, ok := x.(map[string]any); ok {
					ds = append(ds, fmt.Sprintf("%v %v", m["item"], m["verdict"]))
				}
			}
			add("", strings.Join(ds, ", "))
		}
		add("by ", s("by"))
		add("on ", s("channel"))
	case events.ChangeSetRefused:
		add("decision ", s("decision_id"))
		add("by ", s("by"))
		add("refused ", compact([]byte(s("refused")), 100))
	case events.ChangeSetExpired:
		add("pending ", s("items"))
	case events.ChangeApplyStarted:
		add("item ", s("item"))
		add("", s("tool"))
		add("key ", s("idempotency_key"))
	case events.ChangeApplyCompleted:
		add("item ", s("item"))
		add("→ ", compact([]byte(s("output")), 80))
	case events.ChangeApplyFailed:
		add("item ", s("item"))
		if s("stale") == "true" {
			parts = append(parts, "stale")
		}
		if e, ok := d["error"].(map[string]any); ok {
			add("", truncate(firstLine(fmt.Sprint(e["message"])), 100))
		}
	default:
		return compact(ev.Data(), 160)
	}
	return strings.Join(parts, "  ")
}

// firstLine is the first line of s, whole: the caller truncates.
func firstLine(s string) string { return textutil.FirstLine(s, len(s)) }

// truncate is s as one safe line (textutil.OneLine: what an agent wrote
// cannot move the cursor, clear the screen or fake a line), cut to n
// bytes.
func truncate(s string, n int) string { return textutil.Cut(textutil.OneLine(s), n) }

// oneLine is s as one safe line, not cut.
func oneLine(s string) string { return textutil.OneLine(s) }

func compact(b []byte, n int) string {
	return truncate(strings.Join(strings.Fields(string(b)), " "), n)
}

// shortType drops the "heed." prefix for tables.
func shortType(t string) string { return strings.TrimPrefix(t, "heed.") }
