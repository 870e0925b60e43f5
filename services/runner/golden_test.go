package runner

// Golden histories of the runner's decisions, as Temporal's samples replay
// recorded workflow histories: each testdata/golden/<name>.yaml is a
// scenario (a skill, the tools' results, what the outside world does and
// when), and testdata/golden/<name>.jsonl is the event log it produces,
// one CloudEvent a line in JSON format. The test drives the scenario
// through the decision function and the fold with a simulated clock and
// no server, and compares the log with the golden one; it also folds the
// golden log afresh and checks the state equals the runner's, which
// applied its own events before they were stored.
//
//	go test ./services/runner -run Golden -update   # rewrite the .jsonl files
//
// A rewritten log is reviewed like code: it is what the runner does.

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/lib/runstate"
	"github.com/heedhq/heed/lib/skill"
	"github.com/heedhq/heed/lib/tool"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.jsonl from the decisions")

// goldenRun is the run id of every scenario; goldenStart is when it is
// requested.
const goldenRun = "r-golden"

var goldenStart = time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)

type scenario struct {
	Description string         `yaml:"description"`
	Skill       string         `yaml:"skill"`
	Inputs      map[string]any `yaml:"inputs"`
	Yes         bool           `yaml:"yes"`
	Agent       string         `yaml:"agent"`
	Tools       string         `yaml:"tools"` // a tools file, when a tool's settings matter
	HealWait    string         `yaml:"heal_wait"`
	HealTimeout string         `yaml:"heal_timeout"`
	// Results are each tool's results, in call order.
	Results map[string][]toolResult `yaml:"results"`
	Learned struct {
		KnownIssues []map[string]any            `yaml:"known_issues"`
		Warnings    map[string][]map[string]any `yaml:"warnings"` // by tool
	} `yaml:"learned"`
	// Reactions are the outside world: when the event with id On is in
	// the log, the events of Publish are appended After later.
	Reactions []reaction `yaml:"reactions"`
	Expect    string     `yaml:"expect"` // the run's final status
}

type toolResult struct {
	Output   any            `yaml:"output"`
	Error    map[string]any `yaml:"error"`
	Duration string         `yaml:"duration"`
}

type reaction struct {
	On      string         `yaml:"on"`
	After   string         `yaml:"after"`
	Publish []outsideEvent `yaml:"publish"`
}

type outsideEvent struct {
	Type    string         `yaml:"type"`
	ID      string         `yaml:"id"`
	Subject string         `yaml:"subject"`
	Source  string         `yaml:"source"`
	Data    map[string]any `yaml:"data"`
}

func TestGoldenHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("want at least 6 golden scenarios, found %d", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc := readScenario(t, f)
			s := newSim(t, sc)
			s.run()
			if s.state.Status != sc.Expect {
				t.Errorf("the run ended %q, the scenario expects %q", s.state.Status, sc.Expect)
			}
			eventstest.Golden(t, strings.TrimSuffix(f, ".yaml")+".jsonl", eventstest.JSONL(t, s.log), *update)
			// The golden log, folded afresh in log order, gives the state
			// the runner reached applying its own events early.
			checkSameFold(t, s.state, s.consumed)
			checkRestarts(t, s)
			checkReloads(t, s)
		})
	}
}

func readScenario(t *testing.T, path string) *scenario {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sc scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &sc
}

// sim is one runner, its run and the world around it, on a simulated
// clock. Events are delivered in log order; time moves only when nothing
// is left to deliver, to the earliest timer.
type sim struct {
	t        *testing.T
	sc       *scenario
	d        *decider
	skills   *skill.Cache
	now      time.Time
	state    *runstate.Run
	log      []*events.Event
	ids      map[string]bool
	consumed []*events.Event // what the runner consumed, in log order
	next     int             // the next log entry to deliver
	timers   []*simTimer
	order    int
	calls    map[[2]int]CallState
	waits    map[string]*simTimer
	results  map[string]int // calls made per tool
}

type simTimer struct {
	at      time.Time
	order   int
	stopped bool
	fire    func()
}

func newSim(t *testing.T, sc *scenario) *sim {
	s := &sim{t: t, sc: sc, skills: skill.NewCache(), now: goldenStart, state: runstate.New(goldenRun), ids: map[string]bool{},
		calls: map[[2]int]CallState{}, waits: map[string]*simTimer{}, results: map[string]int{}}
	reg := &tool.Registry{}
	if sc.Tools != "" {
		var err error
		if reg, err = tool.Load("tools.yaml", []byte(sc.Tools)); err != nil {
			t.Fatal(err)
		}
	}
	s.d = &decider{healWait: dur(t, sc.HealWait, 3*time.Second), healTimeout: dur(t, sc.HealTimeout, 2*time.Minute), tools: reg,
		learned: scriptedLearned{sc: sc, t: t}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return s
}

func dur(t *testing.T, s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// scriptedLearned is the learned state a scenario gives.
type scriptedLearned struct {
	sc *scenario
	t  *testing.T
}

func (l scriptedLearned) KnownIssues(tools []string) []events.KnownIssue {
	var out []events.KnownIssue
	for _, m := range l.sc.Learned.KnownIssues {
		var k events.KnownIssue
		viaJSON(l.t, m, &k)
		for _, t := range tools {
			if t == k.Tool {
				out = append(out, k)
			}
		}
	}
	return out
}

func (l scriptedLearned) Warnings(toolName string, _ map[string]any, _ time.Time) []events.RunWarningData {
	var out []events.RunWarningData
	for _, m := range l.sc.Learned.Warnings[toolName] {
		var w events.RunWarningData
		viaJSON(l.t, m, &w)
		out = append(out, w)
	}
	return out
}

func viaJSON(t *testing.T, in, out any) {
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func (s *sim) after(d time.Duration, fire func()) *simTimer {
	s.order++
	tm := &simTimer{at: s.now.Add(d), order: s.order, fire: fire}
	s.timers = append(s.timers, tm)
	return tm
}

// append stores an event in the log, as JetStream would: a duplicate id
// is dropped.
func (s *sim) append(ev events.Event) {
	if s.ids[ev.ID()] {
		return
	}
	s.ids[ev.ID()] = true
	if ev.Time().IsZero() {
		ev.SetTime(s.now)
	}
	s.log = append(s.log, &ev)
	for _, r := range s.sc.Reactions {
		if r.On != ev.ID() {
			continue
		}
		r := r
		s.after(dur(s.t, r.After, 0), func() {
			for _, p := range r.Publish {
				subject, source := p.Subject, p.Source
				if subject == "" {
					subject = goldenRun
				}
				if source == "" {
					source = "golden/outside"
				}
				out, err := events.NewEvent(events.Type(p.Type), subject, p.ID, source, p.Data)
				if err != nil {
					s.t.Fatal(err)
				}
				out.SetTime(s.now)
				s.append(out)
			}
		})
	}
}

func (s *sim) run() {
	sk, err := skill.Load("skill.yaml", []byte(s.sc.Skill))
	if err != nil {
		s.t.Fatalf("scenario skill: %v", err)
	}
	req, err := events.NewEvent(events.RunRequested, goldenRun, goldenRun+"/requested", "golden/agent", events.RunRequestedData{
		Skill: events.SkillRef{Name: sk.Name, Source: sk.Source, Digest: sk.Digest, File: "skill.yaml"}, Inputs: s.sc.Inputs, Yes: s.sc.Yes,
		RequestedBy: "user:golden", Agent: s.sc.Agent})
	if err != nil {
		s.t.Fatal(err)
	}
	req.SetTime(s.now)
	s.append(req)
	for steps := 0; steps < 10_000; steps++ {
		if s.next < len(s.log) {
			s.next++
			s.deliver(s.log[s.next-1], uint64(s.next))
			continue
		}
		sort.SliceStable(s.timers, func(i, j int) bool {
			if !s.timers[i].at.Equal(s.timers[j].at) {
				return s.timers[i].at.Before(s.timers[j].at)
			}
			return s.timers[i].order < s.timers[j].order
		})
		if len(s.timers) == 0 {
			return
		}
		tm := s.timers[0]
		s.timers = s.timers[1:]
		if tm.stopped {
			continue
		}
		s.now = tm.at
		tm.fire()
	}
	s.t.Fatal("the scenario did not settle")
}

// deliver hands one stored event to the runner, as its consumer does.
func (s *sim) deliver(ev *events.Event, seq uint64) {
	t := events.Type(ev.Type())
	if t.Kind() != "run" && t != events.ConfirmAnswered || runIDOf(ev) != goldenRun {
		return
	}
	s.consumed = append(s.consumed, ev)
	if err := s.state.Apply(ev, seq, s.skills); err != nil {
		s.t.Fatalf("apply %s: %v", ev.ID(), err)
	}
	var ref struct {
		Index   int `json:"index"`
		Attempt int `json:"attempt"`
	}
	_ = json.Unmarshal(ev.Data(), &ref)
	switch t {
	case events.HealTriggered, events.HealRetried, events.HealGaveUp, events.HealEscalated:
		if w := s.waits[flightKey(goldenRun, ref.Index, ref.Attempt)]; w != nil {
			w.stopped = true
		}
	case events.RunStepCompleted, events.RunStepFailed:
		delete(s.calls, [2]int{ref.Index, ref.Attempt})
	}
	dec := s.d.decide(s.state, ev, Facts{Now: func() time.Time { return s.now }, Calls: func(i, a int) CallState { return s.calls[[2]int{i, a}] }})
	for _, out := range dec.Events {
		s.append(out)
	}
	switch {
	case dec.Launch != nil:
		s.launch(dec.Launch)
	case dec.Wait != nil:
		w := dec.Wait
		if s.waits[w.Key] == nil || s.waits[w.Key].stopped {
			s.waits[w.Key] = s.after(w.After, func() {
				ev := w.Event
				ev.SetTime(s.now)
				s.append(ev)
			})
		}
	}
}

// launch makes a tool call with the scenario's next result for the tool.
func (s *sim) launch(l *Launch) {
	key := [2]int{l.Index, l.Attempt}
	s.calls[key] = CallRunning
	s.after(l.Delay, func() {
		if l.Start != nil {
			ev := *l.Start
			ev.SetTime(s.now)
			s.append(ev)
		}
		script := s.sc.Results[l.Step.Tool]
		n := s.results[l.Step.Tool]
		if n >= len(script) {
			s.t.Fatalf("the scenario has no result for call %d of %s", n+1, l.Step.Tool)
		}
		s.results[l.Step.Tool]++
		r := script[n]
		res := tool.Result{Output: r.Output, Duration: dur(s.t, r.Duration, 250*time.Millisecond)}
		if r.Error != nil {
			var e tool.Error
			viaJSON(s.t, r.Error, &e)
			res.Err = &e
		}
		s.after(res.Duration, func() {
			ev, err := resultEvent(goldenRun, l, res, s.now)
			if err != nil {
				s.t.Fatal(err)
			}
			s.calls[key] = CallDone
			s.append(ev)
		})
	})
}

// checkSameFold folds the events a reader consumed afresh, in log order,
// and compares the state with want.
func checkSameFold(t *testing.T, want *runstate.Run, consumed []*events.Event) {
	t.Helper()
	fresh := runstate.New(want.ID)
	cache := skill.NewCache()
	for i, ev := range consumed {
		if err := fresh.Apply(ev, uint64(i+1), cache); err != nil {
			t.Fatal(err)
		}
	}
	a, err := want.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := fresh.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the runner's state and a fresh fold of the log differ:\nrunner: %s\nfold:   %s", a, b)
	}
}

// checkReloads is checkRestarts for a runner that reloads the run from the
// run's own log, as it does after a restart (the answers are in the
// confirmations' logs, not the run's): the answers it then reads from the
// run's resumes and completions are checked against the confirmations'
// answers in the log so far (engine.unbackedResumes), and must all be
// backed — a reload that refused a real answer would write a pause the
// golden log does not have.
func checkReloads(t *testing.T, s *sim) {
	t.Helper()
	inLog := map[string]string{}
	pos := map[string]int{}
	for i, ev := range s.log {
		inLog[ev.ID()] = string(ev.Data())
		pos[ev.ID()] = i
	}
	for j := 1; j <= len(s.consumed); j++ {
		cause := s.consumed[j-1]
		r := runstate.New(goldenRun)
		for i, ev := range s.consumed[:j] {
			if events.Type(ev.Type()).Kind() != "run" && ev != cause {
				continue // not in the run's log
			}
			if err := r.Apply(ev, uint64(i+1), s.skills); err != nil {
				t.Fatal(err)
			}
		}
		answers := map[string]*events.ConfirmAnsweredData{} // the first answer of each confirmation so far
		for _, ev := range s.log[:pos[cause.ID()]+1] {
			if events.Type(ev.Type()) != events.ConfirmAnswered || answers[ev.Subject()] != nil {
				continue
			}
			var a events.ConfirmAnsweredData
			if err := json.Unmarshal(ev.Data(), &a); err == nil {
				answers[ev.Subject()] = &a
			}
		}
		bad := map[int]bool{}
		for i := range r.Steps {
			st := &r.Steps[i]
			if !st.AnswerFromRun || st.Answer == nil || r.Terminal() {
				continue
			}
			cid := st.ConfirmID
			if cid == "" {
				cid = ConfirmID(goldenRun, i, max(st.Attempt, 1))
			}
			if a := answers[cid]; a != nil && a.Choice == st.Answer.Choice {
				st.Answer, st.AnswerFromRun = &events.ConfirmAnsweredData{Choice: a.Choice, Method: a.Method, By: a.By, Reason: a.Reason}, false
				continue
			}
			bad[i] = true
		}
		now := cause.Time()
		dec := s.d.decide(r, cause, Facts{Now: func() time.Time { return now }, Calls: func(int, int) CallState { return CallNone }, Unbacked: func(i int) bool { return bad[i] }})
		for _, ev := range dec.Events {
			data, ok := inLog[ev.ID()]
			if !ok {
				t.Errorf("a runner that reloaded the run's log after %s writes %s (%s), which the golden log does not have", cause.ID(), ev.ID(), ev.Data())
			} else if data != string(ev.Data()) {
				t.Errorf("a runner that reloaded the run's log after %s writes %s with %s, the golden log has %s", cause.ID(), ev.ID(), ev.Data(), data)
			}
		}
	}
}

// checkRestarts restarts the runner after every event it consumed: a
// runner that folds the log up to that event afresh (no call in flight,
// nothing in memory) and decides must write nothing the golden log does
// not have — the same ids, so JetStream drops the repeats — and must call
// a tool again only for an attempt whose result is not in the log yet.
func checkRestarts(t *testing.T, s *sim) {
	t.Helper()
	inLog := map[string]string{} // id → data
	for _, ev := range s.log {
		inLog[ev.ID()] = string(ev.Data())
	}
	for j := 1; j <= len(s.consumed); j++ {
		r := runstate.New(goldenRun)
		for i, ev := range s.consumed[:j] {
			if err := r.Apply(ev, uint64(i+1), s.skills); err != nil {
				t.Fatal(err)
			}
		}
		cause := s.consumed[j-1]
		now := cause.Time()
		dec := s.d.decide(r, cause, Facts{Now: func() time.Time { return now }, Calls: func(int, int) CallState { return CallNone }})
		for _, ev := range dec.Events {
			data, ok := inLog[ev.ID()]
			if !ok {
				t.Errorf("a runner restarted after %s writes %s, which the golden log does not have", cause.ID(), ev.ID())
			} else if data != string(ev.Data()) {
				// Same id, other content: JetStream would drop it as a
				// repeat, hiding a decision that differs.
				t.Errorf("a runner restarted after %s writes %s with %s, the golden log has %s", cause.ID(), ev.ID(), ev.Data(), data)
			}
		}
		if l := dec.Launch; l != nil {
			for _, ev := range s.consumed[:j] {
				if ev.ID() == goldenRun+"/"+stepSuffix(l.Index, l.Attempt, "completed") || ev.ID() == goldenRun+"/"+stepSuffix(l.Index, l.Attempt, "failed") {
					t.Errorf("a runner restarted after %s calls %s again for attempt %d, whose result is in the log", cause.ID(), l.Step.Tool, l.Attempt)
				}
			}
		}
	}
}
