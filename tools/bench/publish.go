package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The publish section compares, message for message, heed's publish path
// (events.Bus: build the event, check attributes, validate the data against
// the type's JSON Schema, encode the CloudEvents headers, publish with the
// event id as Nats-Msg-Id) with a bare nats.go JetStream publish of the same
// bytes with a unique Nats-Msg-Id. Both go to file-storage streams with the
// same settings (the raw stream copies heed's event stream configuration),
// so the server does the same work: store, deduplicate, acknowledge. Every
// timed case starts on a freshly created, empty stream.
const (
	rawStream       = "BENCH_RAW"
	rawSubjectRoot  = "bench.raw"
	hdrStream       = "BENCH_HDR"
	hdrSubjectRoot  = "bench.hdr"
	benchEventType  = events.RunStepCompleted
	benchSource     = "heed-bench"
	ackWaitTimeout  = 2 * time.Minute
	syncCaseTimeout = 10 * time.Minute
)

type pubCase struct {
	key         string // part of subjects and ids: letters only
	name        string
	heed        bool
	async       bool
	heedHeaders bool // raw publish with heed's headers (hdrSync, hdrAsync)
}

var (
	rawSync   = pubCase{key: "rawsync", name: "raw JetStream, sync"}
	heedSync  = pubCase{key: "heedsync", name: "heed Bus, sync", heed: true}
	rawAsync  = pubCase{key: "rawasync", name: "raw JetStream, async", async: true}
	heedAsync = pubCase{key: "heedasync", name: "heed Bus, async", heed: true, async: true}
	// hdrSync and hdrAsync are the raw publish carrying heed's header set (a
	// copy of what events.EncodeUnchecked writes, with this message's id):
	// the cost of heed's wire format without any of heed's code. Their
	// stream is BENCH_HDR, subjects bench.hdr.>.
	hdrSync  = pubCase{key: "hdrsync", name: "raw JetStream + heed's headers, sync", heedHeaders: true}
	hdrAsync = pubCase{key: "hdrasync", name: "raw JetStream + heed's headers, async", async: true, heedHeaders: true}
)

var allCases = []pubCase{rawSync, heedSync, hdrSync, rawAsync, heedAsync, hdrAsync}

// measurement is one timed run of one case.
type measurement struct {
	n       int
	elapsed time.Duration
	lat     []time.Duration // per publish, sorted; sync only
	stalls  int             // async publishes refused for too many pending, then retried
}

func (m measurement) rate() float64 { return float64(m.n) / m.elapsed.Seconds() }

// stepCompletedData is a schema-valid heed.run.step.completed payload of
// exactly size bytes (or the smallest valid one if size is smaller).
func stepCompletedData(size int) json.RawMessage {
	build := func(output string) []byte {
		b, err := json.Marshal(struct {
			Step       string  `json:"step"`
			Index      int     `json:"index"`
			Attempt    int     `json:"attempt"`
			Output     string  `json:"output"`
			DurationMS float64 `json:"duration_ms"`
		}{"deploy", 3, 1, output, 12.5})
		if err != nil {
			panic(err)
		}
		return b
	}
	base := len(build(""))
	const filler = "deployed web-7f9c to production: 3/3 replicas healthy, rollout complete. "
	pad := max(0, size-base)
	out := strings.Repeat(filler, pad/len(filler)+1)[:pad]
	return build(out)
}

func runPublish(ctx context.Context, env *benchEnv) (*result, error) {
	cfg := env.cfg
	data := stepCompletedData(cfg.payload)
	count := func(c pubCase, async, sync int) int {
		if c.async {
			return async
		}
		return sync
	}

	// Warm up every path (client and server code, the validator, the heap)
	// before anything is timed.
	if cfg.warmAsync > 0 {
		for _, c := range allCases {
			n := count(c, cfg.warmAsync, cfg.warmSync)
			if n == 0 {
				continue
			}
			m, err := runCase(ctx, env, c, "w", n, 1, data)
			if err != nil {
				return nil, fmt.Errorf("warm-up %s: %w", c.name, err)
			}
			env.logf("warm-up   %-38s %7d msgs  %s", c.name, n, rateString(m.rate()))
		}
	}

	// Rounds. In a round every case of a group publishes its messages in
	// slices, the cases taking turns slice by slice, and the order of the
	// turns alternates; so raw and heed are measured close together in time
	// and drift (a noisy neighbour, the page cache) hits both alike.
	got := map[pubCase][]measurement{}
	for r := 1; r <= cfg.rounds; r++ {
		for _, group := range [][]pubCase{{rawSync, heedSync, hdrSync}, {rawAsync, heedAsync, hdrAsync}} {
			ms, err := runInterleaved(ctx, env, group, "r"+strconv.Itoa(r), r, data)
			if err != nil {
				return nil, fmt.Errorf("round %d: %w", r, err)
			}
			for i, c := range group {
				m := ms[i]
				got[c] = append(got[c], m)
				line := fmt.Sprintf("round %d/%d %-38s %7d msgs in %6.2fs  %s", r, cfg.rounds, c.name, m.n, m.elapsed.Seconds(), rateString(m.rate()))
				if !c.async {
					line += fmt.Sprintf("  p50 %s  p99 %s", micros(percentile(m.lat, 50)), micros(percentile(m.lat, 99)))
				}
				if m.stalls > 0 {
					line += fmt.Sprintf("  (%d stalls retried)", m.stalls)
				}
				env.logf("%s", line)
			}
		}
	}
	return publishResult(cfg, data, got), nil
}

// runCase runs one case alone: n messages in the given number of slices.
func runCase(ctx context.Context, env *benchEnv, c pubCase, tag string, n, nSlices int, data json.RawMessage) (measurement, error) {
	ms, err := runInterleavedN(ctx, env, []pubCase{c}, tag, 0, []int{n}, nSlices, data)
	if err != nil {
		return measurement{}, err
	}
	return ms[0], nil
}

func runInterleaved(ctx context.Context, env *benchEnv, group []pubCase, tag string, round int, data json.RawMessage) ([]measurement, error) {
	ns := make([]int, len(group))
	for i, c := range group {
		ns[i] = env.cfg.nSync
		if c.async {
			ns[i] = env.cfg.nAsync
		}
	}
	return runInterleavedN(ctx, env, group, tag, round, ns, env.cfg.slices, data)
}

// runInterleavedN opens every case of group (fresh stream, own connection),
// then runs slice after slice, each case in turn, and checks at the end that
// every message was stored.
func runInterleavedN(ctx context.Context, env *benchEnv, group []pubCase, tag string, round int, ns []int, nSlices int, data json.RawMessage) ([]measurement, error) {
	runs := make([]*caseRun, len(group))
	defer func() {
		for _, r := range runs {
			if r != nil {
				r.close()
			}
		}
	}()
	for i, c := range group {
		r, err := openCase(ctx, env, c, tag, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		runs[i] = r
	}
	order := make([]int, len(group))
	for s := range nSlices {
		for i := range order {
			order[i] = i
		}
		if (round+s)%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			n := ns[i]/nSlices + boolInt(s < ns[i]%nSlices)
			if err := runs[i].publish(ctx, n); err != nil {
				return nil, fmt.Errorf("%s: %w", group[i].name, err)
			}
		}
	}
	out := make([]measurement, len(group))
	for i, r := range runs {
		m, err := r.finish(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", group[i].name, err)
		}
		out[i] = m
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func publishResult(cfg config, data []byte, got map[pubCase][]measurement) *result {
	rates := func(c pubCase) []float64 {
		var out []float64
		for _, m := range got[c] {
			out = append(out, m.rate())
		}
		return out
	}
	latMedian := func(c pubCase, p float64) time.Duration {
		var xs []float64
		for _, m := range got[c] {
			xs = append(xs, float64(percentile(m.lat, p)))
		}
		return time.Duration(median(xs))
	}

	cases := table{
		columns: []string{"Case", "Msgs per round", "msgs/s (median)", "msgs/s min–max", "p50 per publish", "p99 per publish"},
	}
	for _, c := range allCases {
		rs := rates(c)
		n := cfg.nSync
		if c.async {
			n = cfg.nAsync
		}
		p50, p99 := "—", "—"
		if !c.async {
			p50, p99 = micros(latMedian(c, 50)), micros(latMedian(c, 99))
		}
		cases.rows = append(cases.rows, []string{
			c.name, thousands(int64(n)), thousands(int64(median(rs))),
			thousands(int64(slices.Min(rs))) + "–" + thousands(int64(slices.Max(rs))),
			p50, p99,
		})
	}

	res := &result{tables: []table{cases}}
	ratios := table{
		columns: []string{"heed Bus vs", "heed msgs/s", "baseline msgs/s", "Ratio (of medians)", "Ratio per round", "Target", "Verdict"},
	}
	for _, mode := range [][2]pubCase{{heedSync, rawSync}, {heedAsync, rawAsync}, {heedSync, hdrSync}, {heedAsync, hdrAsync}} {
		h, r := median(rates(mode[0])), median(rates(mode[1]))
		ratio := h / r
		var perRound []string
		for i := range got[mode[0]] {
			perRound = append(perRound, strconv.FormatFloat(got[mode[0]][i].rate()/got[mode[1]][i].rate(), 'f', 2, 64))
		}
		target, verdict := "—", "—"
		if mode[0].async && mode[1] == rawAsync {
			target = "≥ " + strconv.FormatFloat(cfg.target, 'f', 2, 64)
			verdict = "PASS"
			if ratio < cfg.target {
				verdict = "MISS"
				res.missed = true
			}
		}
		ratios.rows = append(ratios.rows, []string{
			mode[1].name, thousands(int64(h)), thousands(int64(r)),
			strconv.FormatFloat(ratio, 'f', 2, 64), strings.Join(perRound, ", "), target, verdict,
		})
	}
	res.tables = append(res.tables, ratios)

	rawHdr, heedHdr := headerBytes(rawSync, data), headerBytes(heedSync, data)
	stalls := 0
	for _, ms := range got {
		for _, m := range ms {
			stalls += m.stalls
		}
	}
	res.notes = []string{
		fmt.Sprintf("Payload: %d bytes of JSON (%s data); raw publishes the same bytes as an opaque payload.", len(data), benchEventType),
		fmt.Sprintf("Headers on the wire: raw %d bytes (Nats-Msg-Id only), heed %d bytes (CloudEvents binary mode: ce-specversion, ce-id, ce-source, ce-type, ce-subject, ce-time, Nats-Msg-Id; the budget is in docs/EVENTS.md).", rawHdr, heedHdr),
		"Every case publishes to a freshly created, empty file-storage stream (same configuration for raw and heed: heed's HEED_EVENTS settings, 10-minute duplicate window); all messages are checked as stored.",
		"\"raw JetStream + heed's headers\" is the raw publish carrying heed's header set (copied per message, with its own id): heed's wire format with none of heed's code. heed Bus vs that is the cost of heed's code (building the event, attribute check, schema validation, encoding); that vs raw JetStream is the cost of the wire format.",
		fmt.Sprintf("Async: at most %d publishes in flight (jetstream.WithPublishAsyncMaxPending), timed until PublishAsyncComplete.", cfg.maxPending),
		"Sync latency is one publish call (heed: encode + validate + publish + ack); p50/p99 are the medians of the per-round values.",
		fmt.Sprintf("Heed side includes building each event (events.NewEvent with pre-marshalled data); raw includes building each message id. Async target: heed ≥ %.0f%% of raw.", cfg.target*100),
	}
	if stalls > 0 {
		res.notes = append(res.notes, fmt.Sprintf("%d async publishes stalled on the in-flight bound for longer than nats.go's 200ms and were retried.", stalls))
	}
	return res
}

// streamOf is the stream case c publishes to and, except for heed's own
// stream, the root of its subjects.
func streamOf(c pubCase) (name, subjectRoot string) {
	switch {
	case c.heed:
		return events.EventStream, ""
	case c.heedHeaders:
		return hdrStream, hdrSubjectRoot
	}
	return rawStream, rawSubjectRoot
}

// resetStream deletes and recreates the stream of case c, so that every
// case starts from an empty stream and an empty dedupe map: with a 10-minute
// duplicate window the server otherwise keeps every id of the run in
// memory, and later cases would pay for earlier ones. The benchmark streams
// copy the configuration of heed's event stream (storage, dedupe window,
// limits); only the name and subjects differ.
func resetStream(ctx context.Context, js jetstream.JetStream, c pubCase) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	name, root := streamOf(c)
	if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream %s: %w", name, err)
	}
	if name == events.EventStream {
		return events.Provision(ctx, js, events.DefaultTopology())
	}
	cfg := events.DefaultTopology().EventStreamConfig()
	cfg.Name = name
	cfg.Description = "heed-bench baseline"
	cfg.Subjects = []string{root + ".>"}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return fmt.Errorf("create stream %s: %w", name, err)
	}
	return nil
}

// caseRun is one case in one round: its connection, its fresh stream and
// what has been measured so far.
type caseRun struct {
	c         pubCase
	nc        *nats.Conn
	js        jetstream.JetStream
	bus       *events.Bus
	stream    string
	aggregate string // one aggregate (run) per case and round
	idPrefix  string
	subject   string      // raw cases: where to publish
	headers   nats.Header // hdrSync, hdrAsync: heed's headers, copied into every message
	data      json.RawMessage

	ackErrs     atomic.Int64
	once        sync.Once
	firstAckErr error

	m measurement
}

func openCase(ctx context.Context, env *benchEnv, c pubCase, tag string, data json.RawMessage) (*caseRun, error) {
	nc, err := env.connect(c.key)
	if err != nil {
		return nil, err
	}
	r := &caseRun{c: c, nc: nc, data: data}
	var root string
	r.stream, root = streamOf(c)
	opts := []jetstream.JetStreamOpt{
		jetstream.WithPublishAsyncMaxPending(env.cfg.maxPending),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			r.once.Do(func() { r.firstAckErr = err })
			r.ackErrs.Add(1) // after the write above: finish reads it once this is > 0
		}),
	}
	if c.heed {
		if r.bus, err = events.NewBus(nc, env.codec, opts...); err != nil {
			nc.Close()
			return nil, err
		}
		r.js = r.bus.JetStream()
	} else if r.js, err = jetstream.New(nc, opts...); err != nil {
		nc.Close()
		return nil, err
	}
	if err := resetStream(ctx, r.js, c); err != nil {
		nc.Close()
		return nil, err
	}
	r.aggregate = "bench-" + tag + "-" + c.key
	r.idPrefix = r.aggregate + "-"
	r.subject = root + "." + r.aggregate + "." + benchEventType.Verb()
	if c.heedHeaders {
		ev, err := events.NewEvent(benchEventType, r.aggregate, r.idPrefix+"0", benchSource, data)
		if err != nil {
			nc.Close()
			return nil, err
		}
		msg, err := events.EncodeUnchecked(&ev)
		if err != nil {
			nc.Close()
			return nil, err
		}
		r.headers = msg.Header
	}
	return r, nil
}

func (r *caseRun) close() { r.nc.Close() }

// publish publishes the next n messages of the case, timed.
func (r *caseRun) publish(ctx context.Context, n int) error {
	if n == 0 {
		return nil
	}
	first := r.m.n
	if !r.c.async {
		r.m.lat = slices.Grow(r.m.lat, n)
	}
	runtime.GC()
	start := time.Now()
	var err error
	if r.c.async {
		err = r.publishAsync(ctx, first, first+n)
	} else {
		err = r.publishSync(ctx, first, first+n)
	}
	r.m.elapsed += time.Since(start)
	r.m.n += n
	return err
}

func (r *caseRun) publishSync(ctx context.Context, from, to int) error {
	ctx, cancel := context.WithTimeout(ctx, syncCaseTimeout)
	defer cancel()
	for i := from; i < to; i++ {
		id := r.idPrefix + strconv.Itoa(i)
		if r.c.heed {
			ev, err := events.NewEvent(benchEventType, r.aggregate, id, benchSource, r.data)
			if err != nil {
				return err
			}
			t0 := time.Now()
			if _, err := r.bus.Publish(ctx, &ev); err != nil {
				return err
			}
			r.m.lat = append(r.m.lat, time.Since(t0))
		} else if r.c.heedHeaders {
			msg := r.heedHeadersMsg(id)
			t0 := time.Now()
			if _, err := r.js.PublishMsg(ctx, msg); err != nil {
				return err
			}
			r.m.lat = append(r.m.lat, time.Since(t0))
		} else {
			t0 := time.Now()
			if _, err := r.js.Publish(ctx, r.subject, r.data, jetstream.WithMsgID(id)); err != nil {
				return err
			}
			r.m.lat = append(r.m.lat, time.Since(t0))
		}
	}
	return nil
}

func (r *caseRun) publishAsync(ctx context.Context, from, to int) error {
	for i := from; i < to; i++ {
		if i&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		id := r.idPrefix + strconv.Itoa(i)
		var err error
		switch {
		case r.c.heedHeaders:
			_, err = r.js.PublishMsgAsync(r.heedHeadersMsg(id))
		case !r.c.heed:
			_, err = r.js.PublishAsync(r.subject, r.data, jetstream.WithMsgID(id))
		default:
			var ev events.Event
			if ev, err = events.NewEvent(benchEventType, r.aggregate, id, benchSource, r.data); err != nil {
				return err
			}
			_, err = r.bus.PublishAsync(&ev)
		}
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			r.m.stalls++
			i--
			continue
		}
		if err != nil {
			return err
		}
	}
	select {
	case <-r.js.PublishAsyncComplete():
		return nil
	case <-time.After(ackWaitTimeout):
		return fmt.Errorf("%d acks still pending after %s", r.js.PublishAsyncPending(), ackWaitTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// heedHeadersMsg is the raw message with a copy of heed's headers, the id
// being this message's.
func (r *caseRun) heedHeadersMsg(id string) *nats.Msg {
	h := make(nats.Header, len(r.headers))
	for k, v := range r.headers {
		h[k] = v
	}
	h[events.HeaderPrefix+"id"] = []string{id}
	h[events.HeaderMsgID] = []string{id}
	return &nats.Msg{Subject: r.subject, Header: h, Data: r.data}
}

// finish checks that every publish was acknowledged and stored once.
func (r *caseRun) finish(ctx context.Context) (measurement, error) {
	slices.Sort(r.m.lat)
	if k := r.ackErrs.Load(); k > 0 {
		return r.m, fmt.Errorf("%d publishes failed; first: %v", k, r.firstAckErr)
	}
	stored, err := streamMsgs(ctx, r.js, r.stream)
	if err != nil {
		return r.m, err
	}
	if stored != uint64(r.m.n) {
		return r.m, fmt.Errorf("stream %s stored %d messages, want %d (duplicates or losses would skew the figures)", r.stream, stored, r.m.n)
	}
	return r.m, nil
}

func streamMsgs(ctx context.Context, js jetstream.JetStream, name string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", name, err)
	}
	return info.State.Msgs, nil
}

// headerBytes is the size of the NATS header block a message of case c
// carries (NATS/1.0 line, "Name: value" lines, blank line).
func headerBytes(c pubCase, data json.RawMessage) int {
	const id = "bench-r1-xxxxxxxx-123456"
	h := nats.Header{}
	if c.heed {
		ev, err := events.NewEvent(benchEventType, "bench-r1-xxxxxxxx", id, benchSource, data)
		if err != nil {
			return 0
		}
		msg, err := events.EncodeUnchecked(&ev)
		if err != nil {
			return 0
		}
		h = msg.Header
	} else {
		h.Set(jetstream.MsgIDHeader, id)
	}
	size := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			size += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return size
}

func rateString(r float64) string { return thousands(int64(r)) + " msgs/s" }
