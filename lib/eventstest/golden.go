package eventstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/heedhq/heed/events"
)

// JSONL is a golden event log: one CloudEvent a line in JSON format
// (structured mode), in log order.
func JSONL(t testing.TB, evs []*events.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, ev := range evs {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Golden compares got with the golden file at path, rewriting the file
// first when update is set (a test's -update flag). A difference shows
// the first lines that differ; a rewritten file is reviewed like code.
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to record it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the code no longer produces %s (rerun with -update and review the diff if the change is meant):\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff shows the first lines where two files differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 6; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d\n  want: %s\n  got:  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
