package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	heedclient "github.com/heedhq/heed/client"
	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/nats-io/nats.go"
)

// The escalation workload (issue 14) runs against `heed up` in a child
// process, as the approval workload does: the simulation of 100
// operations learned from, the routing latency inside the service and end
// to end at a paced 1,000 requests/s, and heed's RSS with 10,000 requests
// held.

// Targets of the escalation workload (issue 14).
const (
	targetLearningCut  = 0.80                  // fewer escalations to people in the second pass
	targetDecideP99    = time.Millisecond      // inside the escalator
	targetEscE2EP99    = 5 * time.Millisecond  // request → reply
	targetEscRate      = 1000                  // requests/s, paced
	targetHeldRSS      = 150e6                 // bytes, 10,000 held
	simOps             = 100                   // operations per pass
	benchApprover      = "user:bench-approver" // the simulated approver, member of every tier
	escLatencyDuration = 5 * time.Second       // of the paced load
	escWaitDecision    = 20 * time.Second      // per held operation in the simulation
	escMetricsHost     = "127.0.0.1"           // heed up's metrics listener
	escDecideMetric    = "heed_escalation_decide_seconds_bucket"
)

// escalationConfig gives every tier the simulated approver as its member,
// so that the presence check runs; the rest is the built-in default.
const escalationConfig = `tiers:
  - {name: tier1, timeout: 5m, members: [{id: "` + benchApprover + `", channels: [bench]}]}
  - {name: tier2, timeout: 5m, members: [{id: "` + benchApprover + `", channels: [bench]}]}
  - {name: top, timeout: 5m, members: [{id: "` + benchApprover + `", channels: [bench]}]}
`

// approver answers every offer as the simulated person: approve unless
// the operation is one it denies. It is present on its presence subject.
type approver struct {
	c   *heedclient.Client
	mu  sync.Mutex
	ops map[string]genOp // escalation id → operation
	on  bool             // answering (off while held requests pile up)
	err error
}

func (a *approver) onRequested(m *nats.Msg) {
	ev, err := a.c.Bus().Codec().Decode(m)
	if err != nil {
		a.mu.Lock()
		a.err = fmt.Errorf("request on %s: %w", m.Subject, err)
		a.mu.Unlock()
		return
	}
	confirmID := ev.Subject()
	escID, _, ok := events.OfferOfConfirmID(confirmID)
	a.mu.Lock()
	op, known := a.ops[escID]
	on := a.on
	a.mu.Unlock()
	if !ok || !known || !on {
		return
	}
	choice := "approve"
	if op.deny {
		choice = "deny"
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for {
			_, err := a.c.Answer(ctx, command.AnswerConfirmation{ID: confirmID, Choice: choice, By: benchApprover, Channel: "bench"})
			// Seen live, perhaps a moment before the stream has it.
			if events.CodeOf(err) == events.CodeNotFound && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if err != nil && events.CodeOf(err) != events.CodeConflict {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
			}
			return
		}
	}()
}

// escCallTimeout bounds each command of the workload: a stalled escalator
// is an error, not a hang (the client retries busy until its deadline).
const escCallTimeout = 10 * time.Second

func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, escCallTimeout)
}

// passResult is one pass of the simulation.
type passResult struct {
	toPeople, approved, denied, auto, cached int
	// people counts what went to people by operation, environment and
	// scope, for the log: which repeats the cache did not take, and why
	// (see peopleSummary).
	people map[string]int
}

// simulate runs the operations as agents would, one after another: ask,
// wait for a held one's decision, do it if approved and report how it
// went.
func simulate(ctx context.Context, c *heedclient.Client, a *approver, pass int, ops []genOp) (passResult, error) {
	r := passResult{people: map[string]int{}}
	for _, op := range ops {
		id := fmt.Sprintf("sim%d-%03d", pass, op.seq)
		a.mu.Lock()
		a.ops[id] = op
		a.mu.Unlock()
		risk, conf := op.risk, op.confidence
		cctx, cancel := callCtx(ctx)
		reply, err := c.RequestEscalation(cctx, command.RequestEscalation{ID: id, EscalationRequestedData: events.EscalationRequestedData{
			Session: op.session, Operation: op.operation, Scope: op.scope, Environment: op.env, Risk: &risk, Confidence: &conf, Requester: "bench/" + op.session,
		}})
		cancel()
		if err != nil {
			return r, fmt.Errorf("%s: %w", id, err)
		}
		status := reply.Status
		switch reply.Routed.Decision {
		case events.RouteEscalate:
			r.toPeople++
			r.people[fmt.Sprintf("%s %s %s (%s)", op.operation, op.env, op.scope, opKinds[op.kind].description)]++
		case events.RouteCachedApprove:
			r.cached++
		default:
			r.auto++
		}
		if status == events.EscalationHeld {
			wctx, cancel := context.WithTimeout(ctx, escWaitDecision)
			st, err := c.WaitEscalation(wctx, id)
			cancel()
			if err != nil {
				a.mu.Lock()
				aerr := a.err
				a.mu.Unlock()
				return r, fmt.Errorf("%s: no decision within %s: %w (the approver: %v)", id, escWaitDecision, err, aerr)
			}
			status = st.Status
		}
		if status != events.EscalationApproved {
			r.denied++
			continue
		}
		r.approved++
		outcome := events.OutcomeSuccess
		if op.fail {
			outcome = events.OutcomeFailure
		}
		cctx, cancel = callCtx(ctx)
		_, err = c.ReportOutcome(cctx, command.ReportOutcome{ID: id, Outcome: outcome, By: "bench/" + op.session})
		cancel()
		if err != nil {
			return r, fmt.Errorf("%s outcome: %w", id, err)
		}
	}
	return r, nil
}

// decideHistogram reads the escalator's decide histogram from heed up's
// metrics: cumulative counts by upper bound.
func decideHistogram(ctx context.Context, addr string) (map[float64]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[float64]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, escDecideMetric+"{") {
			continue
		}
		i := strings.Index(line, `le="`)
		if i < 0 {
			continue
		}
		rest := line[i+4:]
		j := strings.IndexByte(rest, '"')
		le := math.Inf(1)
		if rest[:j] != "+Inf" {
			if le, err = strconv.ParseFloat(rest[:j], 64); err != nil {
				continue
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		out[le] += v
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s on http://%s/metrics", escDecideMetric, addr)
	}
	return out, sc.Err()
}

// metricValue sums the samples of a metric family on heed up's metrics
// endpoint (a gauge such as heed_escalations_held).
func metricValue(ctx context.Context, addr, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum, found = sum+v, true
		}
	}
	if !found {
		return 0, fmt.Errorf("no %s on http://%s/metrics", name, addr)
	}
	return sum, sc.Err()
}

// histP99 is the upper bound of the bucket that holds the 99th percentile
// of the observations between before and after (the histogram's
// resolution: 10, 25, 50, 100, 250, 500 µs, 1, 2.5, 5, 10 ms).
func histP99(before, after map[float64]float64) (time.Duration, float64) {
	var les []float64
	for le := range after {
		les = append(les, le)
	}
	slices.Sort(les)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0, 0
	}
	for _, le := range les {
		if after[le]-before[le] >= 0.99*total {
			if math.IsInf(le, 1) {
				return time.Duration(math.MaxInt64), total
			}
			return time.Duration(le * float64(time.Second)), total
		}
	}
	return 0, total
}

// pacedRequests sends rate requests/s for d, each on its own schedule
// slot, and returns every request → reply latency, sorted, and the same
// by the route each request took.
func pacedRequests(ctx context.Context, c *heedclient.Client, idPrefix string, rate int, d time.Duration, ops []genOp, tripsOut string) ([]time.Duration, map[string][]time.Duration, error) {
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	sent := make([]time.Time, n)
	route := make([]string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		op := ops[i%len(ops)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			risk, conf := op.risk, op.confidence
			cctx, cancel := callCtx(ctx)
			defer cancel()
			t0 := time.Now()
			sent[i] = t0
			rep, err := c.RequestEscalation(cctx, command.RequestEscalation{ID: fmt.Sprintf("%s-%05d", idPrefix, i), EscalationRequestedData: events.EscalationRequestedData{
				Session: op.session, Operation: op.operation, Scope: op.scope, Environment: op.env, Risk: &risk, Confidence: &conf, Requester: "bench/" + op.session,
			}})
			lat[i] = time.Since(t0)
			if err == nil {
				route[i] = string(rep.Routed.Decision)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, nil, err
	}
	if tripsOut != "" {
		var b strings.Builder
		b.WriteString("sent_unix_us,reply_us,route\n")
		for i := range lat {
			fmt.Fprintf(&b, "%d,%d,%s\n", sent[i].UnixMicro(), lat[i].Microseconds(), route[i])
		}
		if err := os.WriteFile(tripsOut, []byte(b.String()), 0o644); err != nil {
			return nil, nil, err
		}
	}
	byRoute := map[string][]time.Duration{}
	for i, r := range route {
		byRoute[r] = append(byRoute[r], lat[i])
	}
	for _, l := range byRoute {
		slices.Sort(l)
	}
	slices.Sort(lat)
	return lat, byRoute, nil
}

// holdMany sends n requests that a tier holds (risk 0.5: tier 1), with
// 50 callers.
func holdMany(ctx context.Context, c *heedclient.Client, n int) error {
	next := make(chan int)
	errs := make(chan error, 50)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				risk, conf := 0.5, 0.8
				cctx, cancel := callCtx(ctx)
				r, err := c.RequestEscalation(cctx, command.RequestEscalation{ID: fmt.Sprintf("held-%05d", i), EscalationRequestedData: events.EscalationRequestedData{
					Session: fmt.Sprintf("held-agent-%d", i%1000), Operation: "deploy", Scope: fmt.Sprintf("service:s%d", i%50), Environment: "stage", Risk: &risk, Confidence: &conf, Requester: "bench",
				}})
				cancel()
				if err == nil && r.Status != events.EscalationHeld {
					err = fmt.Errorf("held-%05d: %s, want held", i, r.Status)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return err
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// runEscalation is the escalation workload against `heed up` in a child
// process.
func runEscalation(ctx context.Context, env *benchEnv) (*result, error) {
	cfgDir, err := os.MkdirTemp(env.cfg.dir, "heed-bench-esc-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(cfgDir)
	cfgFile := filepath.Join(cfgDir, "escalation.yaml")
	if err := os.WriteFile(cfgFile, []byte(escalationConfig), 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	metricsAddr := fmt.Sprintf("%s:%d", escMetricsHost, port)
	upEnv := *env
	upEnv.cfg.upArgs = strings.TrimSpace(env.cfg.upArgs + " --escalation-config " + cfgFile + " --metrics-listen " + metricsAddr)
	up, err := startUp(ctx, &upEnv)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	nc, err := nats.Connect(up.url, nats.Name("heed-bench-escalation"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	c, err := heedclient.New(nc, heedclient.Source("heed-bench"))
	if err != nil {
		return nil, err
	}
	a := &approver{c: c, ops: map[string]genOp{}, on: true}
	stopPresent, err := c.Present(ctx, benchApprover, "bench")
	if err != nil {
		return nil, err
	}
	defer stopPresent()
	sub, err := nc.Subscribe("heed.confirm.*.requested", a.onRequested)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)

	// The simulation: the same 100 operations twice; the learner folds
	// the first pass's decisions and outcomes in between.
	ops := generate(genSeed, simOps)
	env.logf("escalation: simulation, first pass (%d operations)", len(ops))
	first, err := simulate(ctx, c, a, 1, ops)
	if err != nil {
		return nil, err
	}
	if _, _, err := settle(ctx, nc, 2*time.Minute); err != nil {
		return nil, err
	}
	env.logf("escalation: first pass: %+v", first)
	env.logf("escalation: simulation, second pass")
	second, err := simulate(ctx, c, a, 2, ops)
	if err != nil {
		return nil, err
	}
	env.logf("escalation: second pass: %+v", second)
	a.mu.Lock()
	a.on = false
	aerr := a.err
	a.mu.Unlock()
	if aerr != nil {
		return nil, fmt.Errorf("the simulated approver: %w", aerr)
	}
	// The cut is against what people would get without learning: the
	// first pass's escalations plus what its own cache already took from
	// them (the cache learns within the pass too). Pass against pass is
	// printed beside it.
	withoutLearning := first.toPeople + first.cached
	cut, passCut := 0.0, 0.0
	if withoutLearning > 0 {
		cut = 1 - float64(second.toPeople)/float64(withoutLearning)
	}
	if first.toPeople > 0 {
		passCut = 1 - float64(second.toPeople)/float64(first.toPeople)
	}
	ceilPeople, ceilBase, ceilCut := cutCeiling(ops)

	// Routing latency: a paced load of generated operations (another
	// seed), the held ones left held.
	if _, _, err := settle(ctx, nc, 2*time.Minute); err != nil {
		return nil, err
	}
	before, err := decideHistogram(ctx, metricsAddr)
	if err != nil {
		return nil, err
	}
	env.logf("escalation: %d requests/s for %s", targetEscRate, escLatencyDuration)
	lat, byRoute, err := pacedRequests(ctx, c, "lat", targetEscRate, escLatencyDuration, generate(genSeed+1, 1000), escTripsOut(env.cfg.tripsOut))
	if err != nil {
		return nil, err
	}
	after, err := decideHistogram(ctx, metricsAddr)
	if err != nil {
		return nil, err
	}
	decideP99, decided := histP99(before, after)
	env.logf("escalation: decide p99 %s (%.0f steps), request → reply p50 %s p99 %s", bucketBound(decideP99), decided, micros(percentile(lat, 50)), micros(percentile(lat, 99)))
	// How long the consumers take to catch up after the paced load says
	// how far behind it left them (mostly the projections).
	caughtUp, _, err := settle(ctx, nc, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	env.logf("escalation: after the paced load: consumers caught up in %s", caughtUp.Round(10*time.Millisecond))

	// More windows (-esc-windows): the same load again and again, held
	// requests piling up in the same eight sessions. Printed only; the
	// table's figures are the first load's.
	for w := 1; w <= env.cfg.escWindows; w++ {
		out := escTripsOut(env.cfg.tripsOut)
		if out != "" {
			out = strings.TrimSuffix(out, ".csv") + fmt.Sprintf("-w%d.csv", w)
		}
		l, _, err := pacedRequests(ctx, c, fmt.Sprintf("lat%d", w), targetEscRate, 4*time.Second, generate(genSeed+1+uint64(w), 1000), out)
		if err != nil {
			return nil, err
		}
		cu, _, err := settle(ctx, nc, 2*time.Minute)
		if err != nil {
			return nil, err
		}
		env.logf("escalation: window %d: request → reply p50 %s p99 %s; consumers caught up in %s", w, micros(percentile(l, 50)), micros(percentile(l, 99)), cu.Round(10*time.Millisecond))
	}

	// 10,000 held.
	pend := env.cfg.pending
	env.logf("escalation: holding %d requests", pend)
	t0 := time.Now()
	if err := holdMany(ctx, c, pend); err != nil {
		return nil, err
	}
	holdElapsed := time.Since(t0)
	if _, _, err := settle(ctx, nc, 2*time.Minute); err != nil {
		return nil, err
	}
	// The escalator's own count (heed.cmd.escalation.held without a
	// session lists every held request: too big a reply for 10,000).
	heldNow, err := metricValue(ctx, metricsAddr, "heed_escalations_held")
	if err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // let heed's GC run over the burst
	rss, peak, err := up.memory()
	if err != nil {
		return nil, err
	}
	// Held, at rest: as the approval section reads it.
	time.Sleep(restSettle - 2*time.Second)
	rssRest, _, err := up.memory()
	if err != nil {
		return nil, err
	}

	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	e2eP99 := percentile(lat, 99)
	verdicts := []bool{cut >= targetLearningCut, decideP99 <= targetDecideP99, e2eP99 <= targetEscE2EP99, float64(rssRest) <= targetHeldRSS}
	res := &result{tables: []table{{
		caption: "Escalations against `heed up` in a separate process (bench = the agents and the approver)",
		columns: []string{"measure", "value", "target", "verdict"},
		rows: [][]string{
			{fmt.Sprintf("simulation, first pass: escalations to people (of %d)", simOps), fmt.Sprintf("%d (auto %d, cached %d; approved %d, denied %d)", first.toPeople, first.auto, first.cached, first.approved, first.denied), "", ""},
			{"… second pass, the same operations", fmt.Sprintf("%d (auto %d, cached %d; approved %d, denied %d)", second.toPeople, second.auto, second.cached, second.approved, second.denied), "", ""},
			{fmt.Sprintf("… escalations cut by learning (second pass against no learning: %d → %d)", withoutLearning, second.toPeople), fmt.Sprintf("%.0f%%", 100*cut), "≥ 80%", passMiss(verdicts[0])},
			{"… second pass against the first (which learned as it went)", fmt.Sprintf("%.0f%%", 100*passCut), "", ""},
			{fmt.Sprintf("… the most any cache under the seed's rule could cut from this mix (cutCeiling: %d → %d)", ceilBase, ceilPeople), fmt.Sprintf("%.0f%%", 100*ceilCut), "", ""},
			{fmt.Sprintf("routing decision inside the escalator, p99 (%.0f steps, histogram bucket)", decided), bucketBound(decideP99), "≤ 1 ms", passMiss(verdicts[1])},
			{fmt.Sprintf("request → reply, p50 (%d requests at %d/s)", len(lat), targetEscRate), micros(percentile(lat, 50)), "", ""},
			{"request → reply, p99", micros(e2eP99), "≤ 5 ms", passMiss(verdicts[2])},
			{"… by route: requests, p50 / p99", routeFigures(byRoute), "", ""},
			{"… every consumer caught up after the paced load in (the projections' backlog)", caughtUp.Round(10 * time.Millisecond).String(), "", ""},
			{fmt.Sprintf("hold %s requests (50 callers)", thousands(int64(pend))), fmt.Sprintf("%s requests/s (%s); %s held now", thousands(int64(float64(pend)/holdElapsed.Seconds())), holdElapsed.Round(time.Millisecond), thousands(int64(heldNow))), "", ""},
			{fmt.Sprintf("heed RSS with %s held, at rest (VmRSS; consumers caught up, then %s)", thousands(int64(heldNow)), restSettle), mb(rssRest), "≤ 150 MB", passMiss(verdicts[3])},
			{"… RSS 2 s after the consumers caught up", mb(rss), "", ""},
			{"… peak RSS of the whole run (VmHWM)", mb(peak), "", ""},
		},
	}}}
	res.notes = append(res.notes,
		"Simulation: generate(seed 14, 100) in tools/bench/escalation_gen.go: "+strings.Join(mixSummary(ops), ", ")+". Each operation is requested with its risk and confidence (heed.cmd.escalation.request), a held one waited for (heed.escalation.<id>.decided), an approved one reported (heed.cmd.escalation.outcome: success, failure for the share the kind fails). The simulated approver is a member of every tier, present on its presence subject, and answers every offer through heed.cmd.confirm.answer: approve, deny for the share of production deploys and critical operations it denies. The second pass replays the same operations after the learner caught up.",
		"Escalations to people: requests routed escalate (offered to a tier). Auto: approved by a conditional rule or the matrix; cached: approved by the learned decision cache. Without learning, the first pass's cached ones would have gone to people too: that sum is the cut's baseline.",
		"Inside the escalator: heed_escalation_decide_seconds from heed up --metrics-listen (one decide step, routing included, without the log), read before and after the paced load; the figure is the upper bound of the bucket holding the 99th percentile.",
		fmt.Sprintf("End to end: %d requests/s for %s from generate(seed 15), each on its own schedule slot, request → reply of heed.cmd.escalation.request (the reply comes once every write the request called for is stored); the held ones stay held. After it the bench waits until every consumer of HEED_EVENTS has caught up: how long that takes is the backlog the load left, mostly the projections (index, escalations, stats, decisions), which fold behind the log when requests come faster than they can.", targetEscRate, escLatencyDuration),
		"Held: risk 0.5 requests (tier 1) over 1,000 sessions, nobody answering; RSS of heed up (services and embedded nats-server) after the consumers caught up and 2 s, and at rest after 20 s (heed gives memory back after 12 s without work).",
	)
	for _, ok := range verdicts {
		res.missed = res.missed || !ok
	}
	return res, nil
}

// bucketBound says a histogram percentile: "≤ 250.0 µs", or "> 10 ms"
// past the last bucket.
func bucketBound(d time.Duration) string {
	if d == time.Duration(math.MaxInt64) {
		return "> 10 ms (past the last bucket)"
	}
	return "≤ " + micros(d)
}

// escTripsOut is where the paced escalation requests are written with
// -trips-out: next to the approval's round trips.
func escTripsOut(tripsOut string) string {
	if tripsOut == "" {
		return ""
	}
	return strings.TrimSuffix(tripsOut, ".csv") + "-escalation.csv"
}

// routeFigures says how many requests took each route and their p50 and
// p99, routes in name order.
func routeFigures(byRoute map[string][]time.Duration) string {
	routes := make([]string, 0, len(byRoute))
	for r := range byRoute {
		routes = append(routes, r)
	}
	slices.Sort(routes)
	var parts []string
	for _, r := range routes {
		l := byRoute[r]
		parts = append(parts, fmt.Sprintf("%s %d: %s / %s", r, len(l), micros(percentile(l, 50)), micros(percentile(l, 99))))
	}
	return strings.Join(parts, "; ")
}
