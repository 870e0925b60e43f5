package learner_test

// Golden event logs replayed through the projections, as Temporal's samples
// replay workflow histories: each testdata/golden/<name>.jsonl is a log, one
// CloudEvent a line in JSON format (structured mode). The test publishes it
// to a fresh server, keeps every learner projection and the indexer's live
// with their projectors, rebuilds each with events.Replay and compares the
// rebuilt buckets (<bucket>_replay, key → value) with <name>.expected.json.
//
//	go test ./services/learner -run Golden -update   # rewrite the expected files
//
// Review a rewritten file by eye before accepting it: the values are what
// the learner believes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/lib/eventstest"
	"github.com/heedhq/heed/services/indexer"
	"github.com/heedhq/heed/services/learner"
	"github.com/nats-io/nats.go/jetstream"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.expected.json from the replay")

// deleted stands for a tombstone envelope ({"deleted": true}), which
// projections no longer write (a deleted key is removed): none may appear.
const deleted = "(deleted)"

func goldenProjections() []events.Projection {
	return append(learner.Projections(), indexer.Projection{})
}

func TestGoldenLogs(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("want at least 5 golden logs, found %d", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		t.Run(name, func(t *testing.T) { replayGolden(t, f, strings.TrimSuffix(f, ".jsonl")+".expected.json") })
	}
}

// readGolden parses a .jsonl log into events, checking that the ids the
// log's writers derive (fix ids, preference ids, signatures) are the ones
// heed's code derives, so the logs stay true to what heed would write.
func readGolden(t *testing.T, path string) []*events.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*events.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var ev events.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s:%d: not a CloudEvent in JSON format: %v", path, line, err)
		}
		if ev.Time().IsZero() {
			t.Fatalf("%s:%d: a golden event needs a time (projections use it)", path, line)
		}
		checkDerivedIDs(t, path, line, &ev)
		out = append(out, &ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func checkDerivedIDs(t *testing.T, path string, line int, ev *events.Event) {
	t.Helper()
	switch events.Type(ev.Type()) {
	case events.RunStepFailed:
		var d events.StepFailedData
		_ = json.Unmarshal(ev.Data(), &d)
		if d.Error.Message == "" {
			t.Errorf("%s:%d: step.failed without an error message", path, line)
		}
	case events.HealTriggered:
		var d events.HealTriggeredData
		_ = json.Unmarshal(ev.Data(), &d)
		if want := events.ErrorSignature(d.Error.Message); d.Classification.Signature != want {
			t.Errorf("%s:%d: signature %q, heed computes %q", path, line, d.Classification.Signature, want)
		}
	case events.FixLearned:
		var d events.FixLearnedData
		_ = json.Unmarshal(ev.Data(), &d)
		if d.Source == events.FixFromAgent {
			if want := events.LearnedFixID(d.Tool, d.ErrorPattern, d.WhenWas); ev.Subject() != want {
				t.Errorf("%s:%d: fix id %s, heed derives %s", path, line, ev.Subject(), want)
			}
			if want := events.ErrorSignature(d.RootCause); d.ErrorPattern != want {
				t.Errorf("%s:%d: error_pattern %q, heed computes %q", path, line, d.ErrorPattern, want)
			}
		}
	case events.PrefSet:
		var d events.PrefSetData
		_ = json.Unmarshal(ev.Data(), &d)
		want := events.PrefID(events.ScopeSkillStep, d.Skill, d.Step)
		if d.Scope == events.ScopeError {
			want = events.PrefID(events.ScopeError, d.Tool, d.ErrorPattern)
		}
		if ev.Subject() != want {
			t.Errorf("%s:%d: preference id %s, heed derives %s", path, line, ev.Subject(), want)
		}
	}
}

func replayGolden(t *testing.T, logPath, expectedPath string) {
	evs := readGolden(t, logPath)
	env := eventstest.Start(t)
	bus := env.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := bus.JetStream()
	topo := events.DefaultTopology()
	for _, b := range readmodel.Specs() {
		if err := events.ProvisionBucket(ctx, js, topo, b); err != nil {
			t.Fatal(err)
		}
	}
	// The live projectors (Replay compares with them once they caught up).
	pctx, stop := context.WithCancel(context.Background())
	var consumers []*events.Consumer
	for _, p := range goldenProjections() {
		c, err := events.RunProjector(pctx, bus, p, eventstest.Logger(t))
		if err != nil {
			t.Fatalf("projector %s: %v", p.Name(), err)
		}
		consumers = append(consumers, c)
	}
	defer func() {
		stop()
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, c := range consumers {
			c.Stop(dctx)
		}
	}()
	// The log, in binary mode, validated on the way in.
	for i, ev := range evs {
		if _, err := bus.Publish(ctx, ev); err != nil {
			t.Fatalf("%s: event %d (%s %s): %v", logPath, i+1, ev.Type(), ev.ID(), err)
		}
	}

	got := map[string]map[string]any{}
	for _, p := range goldenProjections() {
		rep, err := events.Replay(ctx, bus, p, topo, events.ReplayKeep{})
		if err != nil {
			t.Fatalf("replay %s: %v", p.Name(), err)
		}
		if rep.Skipped != 0 {
			t.Errorf("replay %s skipped %d messages: every golden event must be valid", p.Name(), rep.Skipped)
		}
		if !rep.Identical() {
			t.Errorf("replay %s differs from the live bucket: missing %v, extra %v, different %v", p.Name(), rep.Missing, rep.Extra, rep.Different)
		}
		got[rep.ReplayedTo] = bucketContents(t, ctx, js, rep.ReplayedTo)
	}
	for _, c := range consumers {
		if st := c.Stats(); st.DeadLettered != 0 {
			t.Errorf("a live projector dead-lettered %d events", st.DeadLettered)
		}
	}

	gotJSON, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	gotJSON = append(gotJSON, '\n')
	if *update {
		if err := os.WriteFile(expectedPath, gotJSON, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", expectedPath)
		return
	}
	want, err := os.ReadFile(expectedPath)
	if err != nil {
		t.Fatalf("%v (run with -update to create it, then review it)", err)
	}
	var wantV, gotV any
	if err := json.Unmarshal(want, &wantV); err != nil {
		t.Fatalf("%s: %v", expectedPath, err)
	}
	_ = json.Unmarshal(gotJSON, &gotV)
	wantN, _ := json.MarshalIndent(wantV, "", "  ")
	gotN, _ := json.MarshalIndent(gotV, "", "  ")
	if !bytes.Equal(wantN, gotN) {
		t.Errorf("replayed buckets differ from %s (-update rewrites it):\n%s", expectedPath, lineDiff(string(wantN), string(gotN)))
	}
}

// bucketContents reads a replay bucket: key → value, deleted keys as deleted.
func bucketContents(t *testing.T, ctx context.Context, js jetstream.JetStream, bucket string) map[string]any {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatalf("keys of %s: %v", bucket, err)
	}
	out := map[string]any{}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatalf("%s/%s: %v", bucket, k, err)
		}
		var env struct {
			Deleted bool            `json:"deleted"`
			Value   json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(e.Value(), &env); err != nil {
			t.Fatalf("%s/%s: %v", bucket, k, err)
		}
		if env.Deleted {
			out[k] = deleted
			continue
		}
		var v any
		if err := json.Unmarshal(env.Value, &v); err != nil {
			t.Fatalf("%s/%s: %v", bucket, k, err)
		}
		out[k] = v
	}
	return out
}

// lineDiff lists the lines only in want (-) and only in got (+), in order.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	count := map[string]int{}
	for _, l := range g {
		count[l]++
	}
	var out []string
	for _, l := range w {
		if count[l] > 0 {
			count[l]--
			continue
		}
		out = append(out, "- "+l)
	}
	count = map[string]int{}
	for _, l := range w {
		count[l]++
	}
	for _, l := range g {
		if count[l] > 0 {
			count[l]--
			continue
		}
		out = append(out, "+ "+l)
	}
	if len(out) > 80 {
		out = append(out[:80], "…")
	}
	return strings.Join(out, "\n")
}

// TestProjectionsCrashSafe: every golden log through every projection,
// with a crash before each write of each event and its redelivery after:
// the buckets end as a clean pass (and a replay) leaves them.
func TestProjectionsCrashSafe(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		log := readGolden(t, f)
		t.Run(strings.TrimSuffix(filepath.Base(f), ".jsonl"), func(t *testing.T) {
			for _, p := range goldenProjections() {
				eventstest.CrashSafe(t, p, log)
			}
		})
	}
}
