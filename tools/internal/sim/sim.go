// Package sim is heed's load generator: N runs of a skill against simulated
// NATS tools whose failures recur with a known distribution, with every
// heed service running (each with its own connection) and a simulated agent
// that teaches a fix the first time it sees an error it knows how to fix.
// It measures how much healing needs nobody once a failure was taught.
package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/lib/service"
	"github.com/heedhq/heed/lib/tool"
	"github.com/heedhq/heed/services/confirm"
	"github.com/heedhq/heed/services/healer"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/learner"
	"github.com/heedhq/heed/services/runner"
	"github.com/nats-io/nats.go"
)

// Config configures a simulation.
type Config struct {
	URL         string // NATS with heed provisioned (or not: services provision)
	Runs        int
	Concurrency int
	Seed        uint64
	Logger      *slog.Logger
	// Replay checks every projection against the log at the end.
	Replay bool
}

// Failure kinds the simulated tools produce, with the share of runs that
// hit each. Taught kinds recur with the same bad value and only a learned
// fix heals them; transient kinds heal with the generic patterns.
type failureKind struct {
	name    string
	share   float64
	arg     string // the input that triggers it
	bad     any    // its bad value
	good    any    // the agent's correction
	message string
	taught  bool
}

var kinds = []failureKind{
	{name: "quota", share: 0.10, arg: "class", bad: "small", good: "large", message: "quota exceeded for instance class small in project heed-sim", taught: true},
	{name: "region", share: 0.08, arg: "region", bad: "us-east-9", good: "us-east-1", message: "unknown region us-east-9: no such region", taught: true},
	{name: "api", share: 0.07, arg: "api_version", bad: "v1beta1", good: "v1", message: "API version v1beta1 was removed; use v1", taught: true},
	{name: "network", share: 0.08, message: "dial tcp 10.0.0.7:443: connect: connection refused"},
	{name: "auth", share: 0.07, message: "401 Unauthorized: token expired"},
	{name: "fatal", share: 0.02, message: "internal error: the simulated backend crashed"},
}

// Skill is the simulated workload: provision, deploy, verify, notify.
const Skill = `name: sim_release
description: simulated provisioning and deployment with recurring failures
inputs:
  class: {type: string, default: large}
  region: {type: string, default: us-east-1}
  api_version: {type: string, default: v1}
  transient: {type: string, default: none}
  n: {type: integer, default: 0}
steps:
  - name: provision
    tool: sim_provision
    args:
      class: "{{ inputs.class }}"
      region: "{{ inputs.region }}"
      api_version: "{{ inputs.api_version }}"
      transient: "{{ inputs.transient }}"
    output: vm
  - name: deploy
    tool: sim_deploy
    args:
      vm: "{{ vm.id }}"
      n: "{{ inputs.n }}"
    output: deployed
  - name: verify
    compute: deployed.ok && vm.id != ""
    output: ok
  - name: notify
    tool: sim_notify
    args:
      text: "deployed {{ vm.id }}"
    on_error: continue
summary: "run {{ inputs.n }}: {{ ok }}"
`

// ToolsYAML declares the simulated tools (NATS tools served here) and the
// generic fixes.
const ToolsYAML = `tools:
  sim_provision: {kind: nats, timeout: 10s}
  sim_deploy: {kind: nats, timeout: 10s}
  sim_notify: {kind: nats, timeout: 10s}
  kube_login: {kind: nats, subject: heed.tool.sim_login, timeout: 10s}
  vpn_connect: {kind: nats, subject: heed.tool.sim_vpn, timeout: 10s}
`

// Report is what a simulation measured.
type Report struct {
	Runs            int            `json:"runs"`
	Completed       int            `json:"completed"`
	Failed          int            `json:"failed"`
	Duration        time.Duration  `json:"duration_ns"`
	Failures        int            `json:"failures"`
	FailuresByKind  map[string]int `json:"failures_by_kind"`
	Escalations     int            `json:"escalations"`
	Taught          int            `json:"taught"`
	RecurringAfter  int            `json:"recurring_after_taught"`
	HealedAlone     int            `json:"recurring_healed_without_anyone"`
	ShareHealed     float64        `json:"share_healed_without_anyone"`
	TransientHealed int            `json:"transient_healed_by_patterns"`
	Transient       int            `json:"transient"`
	// Curve: per tenth of the runs (in start order), failures and how
	// many went to the agent.
	Curve []Bucket `json:"curve"`
	// EscalationsFirst100 and EscalationsPer100After compare the first 100
	// runs with the average of every later 100.
	EscalationsFirst100   int                    `json:"escalations_first_100"`
	EscalationsPer100Late float64                `json:"escalations_per_100_after"`
	ReplayIdentical       *bool                  `json:"replay_identical,omitempty"`
	ReplayReports         []*events.ReplayReport `json:"replay,omitempty"`
}

// Bucket is one point of the learning curve.
type Bucket struct {
	Runs        string `json:"runs"`
	Failures    int    `json:"failures"`
	Escalations int    `json:"escalations"`
	AutoHealed  int    `json:"auto_healed"`
}

type env struct {
	nc  *nats.Conn
	bus *events.Bus
}

// Run runs the simulation. Every heed service runs in-process with its own
// connection, as under `heed up`.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Runs <= 0 {
		cfg.Runs = 1000
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 50
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp("", "heed-sim-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	toolsFile := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(toolsFile, []byte(ToolsYAML), 0o644); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	topo := events.DefaultTopology()
	var wg sync.WaitGroup
	start := func(name string, run service.RunFunc) error {
		rt, err := service.Connect(ctx, name, cfg.URL, cfg.Logger, topo)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rt.Close()
			if err := run(ctx, rt); err != nil && ctx.Err() == nil {
				cfg.Logger.Error("service stopped", "service", name, "err", err)
			}
		}()
		return nil
	}
	services := []struct {
		name string
		run  service.RunFunc
	}{
		{"indexer", indexer.Run},
		{"learner", learner.Run},
		{"confirm-router", func(ctx context.Context, rt *service.Runtime) error { return confirm.Run(ctx, rt, confirm.Config{}) }},
		{"healer", func(ctx context.Context, rt *service.Runtime) error {
			return healer.Run(ctx, rt, healer.Config{ToolsFile: toolsFile})
		}},
		{"runner", func(ctx context.Context, rt *service.Runtime) error {
			return runner.Run(ctx, rt, runner.Config{ToolsFile: toolsFile, HealWait: 10 * time.Second})
		}},
	}
	for _, s := range services {
		if err := start(s.name, s.run); err != nil {
			return nil, err
		}
	}
	defer wg.Wait()
	defer cancel()

	nc, err := nats.Connect(cfg.URL, nats.Name("heed-sim"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	v, err := events.NewValidator()
	if err != nil {
		return nil, err
	}
	bus, err := events.NewBus(nc, events.NewCodec(v))
	if err != nil {
		return nil, err
	}
	e := &env{nc: nc, bus: bus}
	if err := serveTools(ctx, nc); err != nil {
		return nil, err
	}
	stopAgent, taught, err := e.agent(ctx)
	if err != nil {
		return nil, err
	}
	defer stopAgent()
	time.Sleep(500 * time.Millisecond) // let services subscribe

	// Plan the runs: each hits at most one failure kind, drawn with the
	// shares above from a seeded generator, so a run is reproducible.
	rng := rand.New(rand.NewPCG(cfg.Seed, 42))
	plans := make([]map[string]any, cfg.Runs)
	for i := range plans {
		in := map[string]any{"n": i}
		x := rng.Float64()
		acc := 0.0
		for _, k := range kinds {
			acc += k.share
			if x < acc {
				if k.arg != "" {
					in[k.arg] = k.bad
				} else {
					in["transient"] = k.name
				}
				break
			}
		}
		plans[i] = in
	}
	began := time.Now()
	runIDs := make([]string, cfg.Runs)
	sem := make(chan struct{}, cfg.Concurrency)
	var runWG sync.WaitGroup
	var startErr atomic.Value
	for i := range plans {
		sem <- struct{}{}
		runWG.Add(1)
		go func(i int) {
			defer runWG.Done()
			defer func() { <-sem }()
			id, err := e.runOne(ctx, plans[i])
			if err != nil {
				startErr.Store(err)
				return
			}
			runIDs[i] = id
		}(i)
	}
	runWG.Wait()
	if err, ok := startErr.Load().(error); ok && err != nil {
		return nil, err
	}
	rep, err := e.report(ctx, runIDs, time.Since(began))
	if err != nil {
		return nil, err
	}
	rep.Taught = int(taught.Load())
	if cfg.Replay {
		identical := true
		for _, p := range append([]events.Projection{indexer.Projection{}}, learner.Projections()...) {
			r, err := events.Replay(ctx, bus, p, topo)
			if err != nil {
				return nil, fmt.Errorf("replay %s: %w", p.Name(), err)
			}
			identical = identical && r.Identical()
			rep.ReplayReports = append(rep.ReplayReports, r)
		}
		rep.ReplayIdentical = &identical
	}
	return rep, nil
}

// runOne starts a run and waits for it to end.
func (e *env) runOne(ctx context.Context, inputs map[string]any) (string, error) {
	req := command.StartRun{Skill: command.SkillSource{Source: Skill}, Inputs: inputs, Yes: true, Agent: "agent/sim", RequestedBy: "heed-sim"}
	body, _ := json.Marshal(req)
	ends := make(chan struct{}, 1)
	var id string
	var mu sync.Mutex
	// Subscribe before starting so the end is never missed: the run id is
	// not known yet, so filter after.
	reply, err := e.nc.RequestWithContext(ctx, command.RunStart, body)
	if err != nil {
		return "", err
	}
	var rep command.RunReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.RunID == "" {
		return "", fmt.Errorf("start: %s", reply.Data)
	}
	mu.Lock()
	id = rep.RunID
	mu.Unlock()
	sub, err := e.nc.Subscribe("heed.run."+id+".*", func(m *nats.Msg) {
		switch {
		case strings.HasSuffix(m.Subject, ".completed"), strings.HasSuffix(m.Subject, ".failed"), strings.HasSuffix(m.Subject, ".cancelled"):
			select {
			case ends <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return "", err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// It may have ended before we subscribed.
	if done, _ := e.ended(ctx, id); done {
		return id, nil
	}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ends:
			return id, nil
		case <-t.C:
			if done, _ := e.ended(ctx, id); done {
				return id, nil
			}
		case <-ctx.Done():
			return id, ctx.Err()
		}
	}
}

func (e *env) ended(ctx context.Context, id string) (bool, error) {
	s, err := e.bus.JetStream().Stream(ctx, events.EventStream)
	if err != nil {
		return false, err
	}
	for _, verb := range []string{"completed", "failed", "cancelled"} {
		if _, err := s.GetLastMsgForSubject(ctx, "heed.run."+id+"."+verb); err == nil {
			return true, nil
		}
	}
	return false, nil
}

// serveTools serves the simulated tools: a failure happens on the first
// attempt only for transient kinds (the generic fix plus a retry heals it),
// and on every attempt while the bad value is in the args for taught kinds.
func serveTools(ctx context.Context, nc *nats.Conn) error {
	provision := func(_ context.Context, req tool.Request) (any, error) {
		for _, k := range kinds {
			if k.arg != "" && fmt.Sprint(req.Args[k.arg]) == fmt.Sprint(k.bad) {
				return nil, &tool.Error{Kind: "tool", Message: k.message}
			}
			if k.arg == "" && req.Args["transient"] == k.name && (req.Attempt == 1 || k.name == "fatal") {
				return nil, &tool.Error{Kind: "tool", Message: k.message}
			}
		}
		return map[string]any{"id": "vm-" + req.RunID[len(req.RunID)-6:], "class": req.Args["class"]}, nil
	}
	ok := func(_ context.Context, req tool.Request) (any, error) { return map[string]any{"ok": true}, nil }
	for name, h := range map[string]tool.Handler{"sim_provision": provision, "sim_deploy": ok, "sim_notify": ok, "sim_login": ok, "sim_vpn": ok} {
		if _, err := tool.Serve(ctx, nc, name, "simulated "+name, h); err != nil {
			return err
		}
	}
	return nil
}

// agent plays the run's agent: on an escalation it knows how to fix it
// retries with corrected args (heed learns the fix from that); otherwise it
// lets on_error apply.
func (e *env) agent(ctx context.Context) (func(), *atomic.Int64, error) {
	var taught atomic.Int64
	sub, err := e.nc.Subscribe("heed.run.*.heal.escalated", func(m *nats.Msg) {
		ev, err := e.bus.Codec().Decode(m)
		if err != nil {
			return
		}
		var d events.HealEscalatedData
		if json.Unmarshal(ev.Data(), &d) != nil {
			return
		}
		msg, _ := d.Context["error"].(string)
		go func() {
			for _, k := range kinds {
				if k.taught && strings.Contains(msg, fmt.Sprint(k.bad)) {
					body, _ := json.Marshal(command.RetryStep{RunID: ev.Subject(), Step: d.Step, Args: map[string]any{k.arg: k.good}, By: "agent/sim", Reason: "corrected " + k.arg})
					if _, err := e.nc.RequestWithContext(ctx, command.RunRetry, body); err == nil {
						taught.Add(1)
					}
					return
				}
			}
			body, _ := json.Marshal(command.ContinueRun{RunID: ev.Subject(), By: "agent/sim", Reason: "cannot fix"})
			_, _ = e.nc.RequestWithContext(ctx, command.RunContinue, body)
		}()
	})
	if err != nil {
		return nil, nil, err
	}
	return func() { _ = sub.Unsubscribe() }, &taught, nil
}

// report reads the log and measures.
func (e *env) report(ctx context.Context, runIDs []string, d time.Duration) (*Report, error) {
	rep := &Report{Runs: len(runIDs), Duration: d, FailuresByKind: map[string]int{}}
	type failure struct {
		order    int
		at       time.Time
		kind     string
		taught   bool
		escal    bool
		autoHeal bool
	}
	var fails []failure
	for order, id := range runIDs {
		type stepKey struct{ index, attempt int }
		var status string
		fmap := map[stepKey]*failure{}
		healedBy := map[int]string{}
		escalated := map[stepKey]bool{}
		_, err := events.ReadHistory(ctx, e.bus.JetStream(), events.EventStream, events.SubjectFilter("run", id), 0, func(raw events.RawMsg) error {
			ev, err := e.bus.Codec().DecodeStored(raw)
			if err != nil {
				return nil
			}
			switch events.Type(ev.Type()) {
			case events.RunCompleted:
				status = "completed"
			case events.RunFailed:
				status = "failed"
			case events.RunStepFailed:
				var f events.StepFailedData
				if json.Unmarshal(ev.Data(), &f) == nil && f.Tool == "sim_provision" {
					k := kindOf(f.Error.Message)
					fmap[stepKey{f.Index, f.Attempt}] = &failure{order: order, at: ev.Time(), kind: k.name, taught: k.taught}
				}
			case events.HealEscalated:
				var h events.HealEscalatedData
				if json.Unmarshal(ev.Data(), &h) == nil {
					escalated[stepKey{h.Index, h.Attempt}] = true
				}
			case events.HealHealed:
				var h events.HealHealedData
				if json.Unmarshal(ev.Data(), &h) == nil {
					healedBy[h.Attempt] = h.Via
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		switch status {
		case "completed":
			rep.Completed++
		default:
			rep.Failed++
		}
		for k, f := range fmap {
			f.escal = escalated[k]
			via := healedBy[k.attempt+1]
			f.autoHeal = via == events.PlanLearnedFix || via == events.PlanPatternFix
			fails = append(fails, *f)
		}
	}
	sort.Slice(fails, func(i, j int) bool { return fails[i].at.Before(fails[j].at) })
	// A kind is taught when the first fix for its error is in the log.
	firstTaught := map[string]time.Time{}
	_, err := events.ReadLog(ctx, e.bus.JetStream(), events.EventStream, []string{"heed.fix.*.learned"}, 0, func(raw events.RawMsg) error {
		ev, err := e.bus.Codec().DecodeStored(raw)
		if err != nil {
			return nil
		}
		var f events.FixLearnedData
		if json.Unmarshal(ev.Data(), &f) != nil {
			return nil
		}
		for _, k := range kinds {
			if k.taught && events.ErrorSignature(k.message) == f.ErrorPattern {
				if _, ok := firstTaught[k.name]; !ok {
					firstTaught[k.name] = ev.Time()
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, f := range fails {
		rep.Failures++
		rep.FailuresByKind[f.kind]++
		if f.escal {
			rep.Escalations++
		}
		if !f.taught {
			if f.kind != "fatal" {
				rep.Transient++
				if f.autoHeal {
					rep.TransientHealed++
				}
			}
			continue
		}
		if t, ok := firstTaught[f.kind]; ok && f.at.After(t) {
			rep.RecurringAfter++
			if f.autoHeal {
				rep.HealedAlone++
			}
		}
	}
	if rep.RecurringAfter > 0 {
		rep.ShareHealed = float64(rep.HealedAlone) / float64(rep.RecurringAfter)
	}
	// The curve, per tenth of the runs.
	n := len(runIDs)
	step := max(n/10, 1)
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		b := Bucket{Runs: fmt.Sprintf("%d-%d", lo+1, hi)}
		for _, f := range fails {
			if f.order >= lo && f.order < hi {
				b.Failures++
				if f.escal {
					b.Escalations++
				}
				if f.autoHeal {
					b.AutoHealed++
				}
			}
		}
		rep.Curve = append(rep.Curve, b)
	}
	late, lateRuns := 0, 0
	for _, f := range fails {
		if f.escal {
			if f.order < 100 {
				rep.EscalationsFirst100++
			} else {
				late++
			}
		}
	}
	if n > 100 {
		lateRuns = n - 100
		rep.EscalationsPer100Late = float64(late) * 100 / float64(lateRuns)
	}
	return rep, nil
}

func kindOf(msg string) failureKind {
	for _, k := range kinds {
		if msg == k.message {
			return k
		}
	}
	return failureKind{name: "other"}
}

// Print writes the report as Markdown tables.
func Print(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "%d runs in %s: %d completed, %d failed\n\n", rep.Runs, rep.Duration.Round(time.Millisecond), rep.Completed, rep.Failed)
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(w, "| tool failures | %d |\n", rep.Failures)
	kinds := make([]string, 0, len(rep.FailuresByKind))
	for k := range rep.FailuresByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "| … of kind %s | %d |\n", k, rep.FailuresByKind[k])
	}
	fmt.Fprintf(w, "| handed to the agent | %d |\n", rep.Escalations)
	fmt.Fprintf(w, "| fixes the agent taught (corrected retries) | %d |\n", rep.Taught)
	fmt.Fprintf(w, "| recurring failures after the first teaching | %d |\n", rep.RecurringAfter)
	fmt.Fprintf(w, "| … healed without anyone | %d (**%.1f%%**, target ≥ 80%%) |\n", rep.HealedAlone, rep.ShareHealed*100)
	fmt.Fprintf(w, "| transient failures healed by the generic patterns | %d of %d |\n", rep.TransientHealed, rep.Transient)
	fmt.Fprintf(w, "| escalations in the first 100 runs | %d |\n", rep.EscalationsFirst100)
	fmt.Fprintf(w, "| escalations per 100 runs afterwards | %.1f |\n", rep.EscalationsPer100Late)
	if rep.ReplayIdentical != nil {
		fmt.Fprintf(w, "| heed replay: every projection identical | %v |\n", *rep.ReplayIdentical)
	}
	fmt.Fprintf(w, "\nLearning curve (runs in start order):\n\n| runs | failures | to the agent | healed alone |\n|---|---|---|---|\n")
	for _, b := range rep.Curve {
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", b.Runs, b.Failures, b.Escalations, b.AutoHealed)
	}
}
