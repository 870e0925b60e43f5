package escalator

// Golden histories of the escalator's decisions: each
// testdata/golden/<name>.yaml is a config, the learned cache, who is
// present, and what the world does (requests, answers, deadlines, the
// clock); testdata/golden/<name>.jsonl is the log once the escalator has
// decided every step. No server: the state is folded from the log and
// Decide runs with a simulated clock. Each step is also decided again from
// every point inside it (a restart after any event) and must write the
// same ids, and deciding any step again at the end writes nothing.
//
//	go test ./services/escalator -run Golden -update   # rewrite the .jsonl files

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/escalation"
	"github.com/heedhq/heed/lib/eventstest"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.jsonl from the decisions")

const goldenID = "esc-golden"

var goldenStart = time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)

type goldenScenario struct {
	Description string `yaml:"description"`
	Config      string `yaml:"config"`
	Cache       []struct {
		Operation   string  `yaml:"operation"`
		Environment string  `yaml:"environment"`
		Scope       string  `yaml:"scope"`
		Count       int     `yaml:"count"`
		Rate        float64 `yaml:"success_rate"`
		Candidate   bool    `yaml:"auto_approve_candidate"`
		Boost       float64 `yaml:"confidence_boost"`
	} `yaml:"cache"`
	Absent  []string                       `yaml:"absent"` // members not present
	Request events.EscalationRequestedData `yaml:"request"`
	Steps   []struct {
		After  string `yaml:"after"` // the clock moves first (a duration)
		Answer *struct {
			Offer   int                     `yaml:"offer"`
			Choice  string                  `yaml:"choice"`
			By      string                  `yaml:"by"`
			Channel string                  `yaml:"channel"`
			Method  string                  `yaml:"method"`
			Votes   []events.EscalationVote `yaml:"votes"`
		} `yaml:"answer"`
		Expire int `yaml:"expire"` // the offer whose deadline fired
	} `yaml:"steps"`
	Expect string `yaml:"expect"` // the final status
}

func TestGoldenEscalations(t *testing.T) {
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
			log := replayGolden(t, f)
			eventstest.Golden(t, strings.TrimSuffix(f, ".yaml")+".jsonl", eventstest.JSONL(t, log), *update)
		})
	}
}

func fold(t *testing.T, log []*events.Event) *command.EscalationState {
	st := escalation.New(goldenID)
	for i, ev := range log {
		if ev.Subject() != goldenID {
			continue
		}
		if err := escalation.Apply(st, ev, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func replayGolden(t *testing.T, path string) []*events.Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sc goldenScenario
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	rs, err := ParseRules(path, []byte(sc.Config))
	if err != nil {
		t.Fatal(err)
	}
	now := goldenStart
	facts := func() Facts {
		return Facts{Now: now,
			Reachable: func(_ string, members []string) (bool, []string) {
				for _, m := range members {
					if !slices.Contains(sc.Absent, m) {
						return true, members
					}
				}
				return false, members
			},
			Cache: func(op, env, scope string) *readmodel.Decision {
				for _, c := range sc.Cache {
					if c.Operation == op && c.Environment == env && c.Scope == scope {
						return &readmodel.Decision{Operation: op, Environment: env, Scope: scope, Count: c.Count, SuccessRate: c.Rate, Candidate: c.Candidate, ConfidenceBoost: c.Boost}
					}
				}
				return nil
			}}
	}
	var log []*events.Event
	ids := map[string]bool{}
	// publish appends what is new (JetStream drops a duplicate id).
	publish := func(evs []events.Event) {
		for i := range evs {
			if ids[evs[i].ID()] {
				continue
			}
			ids[evs[i].ID()] = true
			log = append(log, &evs[i])
		}
	}
	decide := func(st *command.EscalationState, c Cause) []events.Event {
		evs, err := Decide(rs, st, c, facts())
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	// step decides one cause, then checks a restart after each event it
	// wrote decides the same events: the same ids and the same content (the
	// same ids alone let a different decision pass, which JetStream's
	// duplicate window would then have hidden).
	var causes []Cause
	step := func(c Cause) {
		before := len(log)
		publish(decide(fold(t, log), c))
		written := log[before:]
		for j := range written {
			again := decide(fold(t, log[:before+j]), c)
			var got, want []string
			for _, ev := range again {
				got = append(got, ev.ID()+" "+string(ev.Data()))
			}
			for _, ev := range written[j:] {
				want = append(want, ev.ID()+" "+string(ev.Data()))
			}
			if !slices.Equal(got, want) {
				t.Errorf("restart after %d events of the step: decides %v, the step wrote %v", before+j, got, want)
			}
		}
		causes = append(causes, c)
	}
	req := sc.Request
	step(Cause{Request: &req})
	for i, s := range sc.Steps {
		if s.After != "" {
			d, err := time.ParseDuration(s.After)
			if err != nil {
				t.Fatal(err)
			}
			now = now.Add(d)
		}
		switch {
		case s.Answer != nil:
			a := s.Answer
			method := a.Method
			if method == "" {
				method = events.MethodUser
			}
			step(Cause{ConfirmID: events.ConfirmIDOfOffer(goldenID, a.Offer), Answer: &events.ConfirmAnsweredData{Choice: a.Choice, By: a.By, Channel: a.Channel, Method: method}, Votes: a.Votes})
		case s.Expire > 0:
			step(Cause{ConfirmID: events.ConfirmIDOfOffer(goldenID, s.Expire), Expired: true})
		default:
			t.Fatalf("step %d does nothing", i)
		}
	}
	// Every cause again at the end (redeliveries): nothing new.
	for _, c := range causes {
		for _, ev := range decide(fold(t, log), c) {
			if !ids[ev.ID()] {
				t.Errorf("deciding again writes %s %s", ev.Type(), ev.ID())
			}
		}
	}
	// Every event is valid for its schema.
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range log {
		if err := v.Validate(events.Type(ev.Type()), ev.Data()); err != nil {
			t.Errorf("%s %s: %v", ev.Type(), ev.ID(), err)
		}
		var m map[string]any
		_ = json.Unmarshal(ev.Data(), &m)
	}
	if st := fold(t, log); st.Status != sc.Expect {
		t.Errorf("status %s, want %s", st.Status, sc.Expect)
	}
	return log
}

// TestProjectionCrashSafe: each golden history through the escalations
// projection, with a crash before each write of each event and its
// redelivery after (see eventstest.CrashSafe).
func TestProjectionCrashSafe(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			t.Parallel()
			eventstest.CrashSafe(t, &Projection{}, replayGolden(t, f))
		})
	}
}
