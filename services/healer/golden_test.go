package healer

// Golden histories of the healer's decisions: each
// testdata/golden/<name>.yaml is a run's history as the rest of the world
// writes it (the runner, an agent), with the learned fixes and the fix
// tools' results, and testdata/golden/<name>.jsonl is the log once the
// healer has handled every event it consumes, as it would in log order.
// No server: the history goes through the fold and the decision functions
// with a simulated clock.
//
//	go test ./services/healer -run Golden -update   # rewrite the .jsonl files

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"os"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.jsonl from the decisions")

const goldenRun = "r-heal"

var goldenStart = time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)

type healScenario struct {
	Description string           `yaml:"description"`
	Rules       string           `yaml:"rules"` // the healer's rules; "" is the default
	Tools       string           `yaml:"tools"` // the tools file
	Fixes       []map[string]any `yaml:"fixes"` // learned fixes (readmodel.Fix)
	// FixResults are each fix tool's results, in call order.
	FixResults map[string][]struct {
		Output any            `yaml:"output"`
		Error  map[string]any `yaml:"error"`
	} `yaml:"fix_results"`
	// History is what the world writes, in order, one second apart; the
	// healer's events follow the event they answer.
	History []struct {
		Type   string         `yaml:"type"`
		ID     string         `yaml:"id"`
		Source string         `yaml:"source"`
		Data   map[string]any `yaml:"data"`
	} `yaml:"history"`
	// Expect is the type of the last event the healer writes.
	Expect string `yaml:"expect"`
}

type scriptedFixes []readmodel.Fix

func (s scriptedFixes) ForTool(name string) []readmodel.Fix {
	var out []readmodel.Fix
	for _, f := range s {
		if f.Tool == name {
			out = append(out, f)
		}
	}
	return out
}

func TestGoldenHealing(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("want at least 6 golden histories, found %d", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			log := replayHealing(t, f)
			checkResumes(t, f, log)
			eventstest.Golden(t, strings.TrimSuffix(f, ".yaml")+".jsonl", eventstest.JSONL(t, log), *update)
		})
	}
}

// replayHealing runs a history through the healer's decisions and returns
// the whole log.
func replayHealing(t *testing.T, path string) []*events.Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := readHealScenario(t, b, path)
	d := goldenDecider(t, path)
	skills := skill.NewCache()
	calls := map[string]int{}
	var log []*events.Event
	var last events.Type
	// fold is what the healer reads: the run's events so far.
	fold := func() *runstate.Run {
		r := runstate.New(goldenRun)
		for i, ev := range log {
			if ev.Subject() == goldenRun {
				if err := r.Apply(ev, uint64(i+1), skills); err != nil {
					t.Fatal(err)
				}
			}
		}
		return r
	}
	publish := func(evs ...events.Event) {
		for i := range evs {
			last = events.Type(evs[i].Type())
			log = append(log, &evs[i])
		}
	}
	for i, h := range sc.History {
		now := goldenStart.Add(time.Duration(i) * time.Second)
		id, source := h.ID, h.Source
		if id == "" {
			id = fmt.Sprintf("%s/h%02d", goldenRun, i)
		}
		if source == "" {
			source = "heed/runner"
		}
		ev, err := events.NewEvent(events.Type(h.Type), goldenRun, id, source, h.Data)
		if err != nil {
			t.Fatal(err)
		}
		ev.SetTime(now)
		log = append(log, &ev)
		switch events.Type(h.Type) {
		case events.RunStepFailed:
			var f events.StepFailedData
			viaJSON(t, h.Data, &f)
			if f.Tool == "" {
				continue
			}
			r := fold()
			for {
				dec := d.heal(r, &f, now)
				publish(dec.Events...)
				if dec.RunFix == nil {
					break
				}
				script := sc.FixResults[dec.RunFix.Call.Tool]
				n := calls[dec.RunFix.Call.Tool]
				if n >= len(script) {
					t.Fatalf("no result scripted for call %d of the fix tool %s", n+1, dec.RunFix.Call.Tool)
				}
				calls[dec.RunFix.Call.Tool]++
				res := tool.Result{Output: script[n].Output, Duration: 500 * time.Millisecond}
				if script[n].Error != nil {
					var e tool.Error
					viaJSON(t, script[n].Error, &e)
					res.Err = &e
				}
				now = now.Add(res.Duration)
				applied, err := fixApplied(r, &f, dec.RunFix, res, now)
				if err != nil {
					t.Fatal(err)
				}
				publish(applied)
				_ = r.Apply(&applied, 0, nil)
			}
		case events.RunStepCompleted:
			var c events.StepCompletedData
			viaJSON(t, h.Data, &c)
			if c.Attempt < 2 {
				continue
			}
			out, err := learn(fold(), &c, id, now)
			if err != nil {
				t.Fatal(err)
			}
			publish(out...)
		}
	}
	if string(last) != sc.Expect {
		t.Errorf("the healer's last event is %q, the history expects %q", last, sc.Expect)
	}
	return log
}

func viaJSON(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

// checkResumes crashes the healer at every point of the golden log: for
// each prefix that ends inside the healer's answer to a failure, a healer
// that reads the prefix afresh must decide exactly what the golden log
// has next (or, before a fix_applied, to run the fix tool), and never
// anything twice.
func checkResumes(t *testing.T, path string, log []*events.Event) {
	t.Helper()
	d := goldenDecider(t, path)
	skills := skill.NewCache()
	for k, ev := range log {
		if events.Type(ev.Type()) != events.RunStepFailed || ev.Source() == Source {
			continue
		}
		var f events.StepFailedData
		if err := json.Unmarshal(ev.Data(), &f); err != nil || f.Tool == "" {
			continue
		}
		end := k + 1
		for end < len(log) && log[end].Source() == Source {
			end++
		}
		for j := k + 1; j <= end; j++ {
			r := runstate.New(goldenRun)
			for i, e := range log[:j] {
				if err := r.Apply(e, uint64(i+1), skills); err != nil {
					t.Fatal(err)
				}
			}
			dec := d.heal(r, &f, log[j-1].Time())
			var got []string
			for _, e := range dec.Events {
				got = append(got, e.ID()+" "+string(e.Data()))
			}
			if dec.RunFix != nil {
				got = append(got, "(run the fix tool)")
			}
			var want []string
			for _, e := range log[j:end] {
				if events.Type(e.Type()) == events.HealFixApplied {
					want = append(want, "(run the fix tool)")
					break
				}
				want = append(want, e.ID()+" "+string(e.Data()))
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("a healer restarted after %s decides %v, the golden log has %v next", log[j-1].ID(), got, want)
			}
		}
	}
}

func readHealScenario(t *testing.T, b []byte, path string) *healScenario {
	t.Helper()
	var sc healScenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &sc
}

// goldenDecider is the healer's decider as a scenario configures it.
func goldenDecider(t *testing.T, path string) *decider {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := readHealScenario(t, b, path)
	src := sc.Rules
	if src == "" {
		src = DefaultRulesYAML
	}
	cfg, err := ParseRules("rules", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	reg := &tool.Registry{}
	if sc.Tools != "" {
		if reg, err = tool.Load("tools.yaml", []byte(sc.Tools)); err != nil {
			t.Fatal(err)
		}
	}
	var fixes scriptedFixes
	for _, m := range sc.Fixes {
		var fx readmodel.Fix
		viaJSON(t, m, &fx)
		fixes = append(fixes, fx)
	}
	return &decider{rules: cfg, tools: reg, fixes: fixes}
}
