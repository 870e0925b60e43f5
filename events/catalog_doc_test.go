package events_test

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite the catalog table in docs/EVENTS.md")

const (
	docPath    = "../docs/EVENTS.md"
	beginMark  = "<!-- catalog:begin -->"
	endMark    = "<!-- catalog:end -->"
	tableHead  = "| Type | Subject | Schema | Producers | Consumers | Meaning |\n|---|---|---|---|---|---|\n"
	rowPattern = "| `%s` | `%s` | [schema](../schemas/%s) | %s | %s | %s |\n"
)

func catalogTable() string {
	var b strings.Builder
	b.WriteString(tableHead)
	for _, info := range events.Catalog() {
		kind := info.Type.Kind()
		fmt.Fprintf(&b, rowPattern, info.Type, info.Type.Subject("<"+kind+"-id>"), schemas.EventSchemaPath(string(info.Type)),
			strings.Join(info.Producers, ", "), strings.Join(info.Consumers, ", "), info.Summary)
	}
	return b.String()
}

// TestEventsDocMatchesCatalogAndSchemas fails when docs/EVENTS.md, the Go
// catalog and schemas/ disagree. Fix with: go test ./events -run EventsDoc -update-doc
func TestEventsDocMatchesCatalogAndSchemas(t *testing.T) {
	var inCatalog []string
	for _, info := range events.Catalog() {
		inCatalog = append(inCatalog, string(info.Type))
	}
	if got, want := strings.Join(schemas.EventTypes(), " "), strings.Join(inCatalog, " "); got != want {
		t.Errorf("schemas/events and the catalog differ:\n schemas: %s\n catalog: %s", got, want)
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s … %s section", docPath, beginMark, endMark)
	}
	table := catalogTable()
	current := strings.TrimSpace(s[i+len(beginMark) : j])
	if *updateDoc {
		s = s[:i+len(beginMark)] + "\n" + table + s[j:]
		if err := os.WriteFile(docPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if current != strings.TrimSpace(table) {
		t.Errorf("the catalog table in %s is out of date; run: go test ./events -run EventsDoc -update-doc", docPath)
	}
	// Every type named anywhere in the doc must exist.
	for _, m := range regexp.MustCompile("`(heed\\.[a-z_]+\\.[a-z_.]+)`").FindAllStringSubmatch(s, -1) {
		if strings.Contains(m[1], "<") || strings.HasPrefix(m[1], "heed.dlq") || strings.HasPrefix(m[1], "heed.cmd") || strings.HasPrefix(m[1], "heed.tool") || strings.HasPrefix(m[1], "heed.schedule") || strings.HasPrefix(m[1], "heed.svc") {
			continue
		}
		if !events.Type(m[1]).Known() && !strings.Contains(m[1], ".*") && strings.Count(m[1], ".") >= 2 {
			if _, _, _, ok := events.ParseSubject(m[1]); ok {
				continue // a concrete subject example
			}
			t.Errorf("%s mentions unknown event type %s", docPath, m[1])
		}
	}
}

// TestSchemasRejectBadInstances: every schema refuses an empty object or a
// wrong type where it requires fields.
func TestSchemasRejectBadInstances(t *testing.T) {
	v, err := events.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range events.Catalog() {
		if err := v.Validate(info.Type, []byte(`"not an object"`)); err == nil {
			t.Errorf("%s accepts a string as data", info.Type)
		}
		if err := v.Validate(info.Type, []byte(`{"surely_unknown_field": 1}`)); err == nil {
			t.Errorf("%s accepts an unknown field", info.Type)
		}
	}
}

const (
	bucketsBegin = "<!-- buckets:begin -->"
	bucketsEnd   = "<!-- buckets:end -->"
	commandsBeg  = "<!-- commands:begin -->"
	commandsEnd  = "<!-- commands:end -->"
)

func bucketsTable() string {
	var b strings.Builder
	b.WriteString("| bucket | written by | key | holds |\n|---|---|---|---|\n")
	for _, info := range readmodel.Buckets() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", info.Name, info.Writer, info.Key, info.Description)
	}
	return b.String()
}

// TestEventsDocBucketsAndCommands: docs/EVENTS.md lists every read-model
// bucket as events/readmodel declares it, and every command with a link to
// its schema; every command schema is a command the contract names.
func TestEventsDocBucketsAndCommands(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, bucketsBegin), strings.Index(s, bucketsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s … %s section", docPath, bucketsBegin, bucketsEnd)
	}
	if *updateDoc {
		s = s[:i+len(bucketsBegin)] + "\n" + bucketsTable() + s[j:]
		if err := os.WriteFile(docPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if strings.TrimSpace(s[i+len(bucketsBegin):j]) != strings.TrimSpace(bucketsTable()) {
		t.Errorf("the buckets table in %s is out of date; run: go test ./events -run EventsDoc -update-doc", docPath)
	}
	i, j = strings.Index(s, commandsBeg), strings.Index(s, commandsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s … %s section", docPath, commandsBeg, commandsEnd)
	}
	table := s[i:j]
	if got, want := strings.Join(schemas.Commands(), " "), strings.Join(sorted(command.Subjects()), " "); got != want {
		t.Errorf("schemas/commands and command.Subjects differ:\n schemas: %s\n command: %s", got, want)
	}
	for _, subject := range command.Subjects() {
		if !strings.Contains(table, "| `"+subject+"` | [schema](../schemas/"+schemas.CommandSchemaPath(subject)+")") {
			t.Errorf("the commands table in %s has no row for %s linking its schema", docPath, subject)
		}
	}
}

func sorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

const (
	streamsBegin = "<!-- streams:begin -->"
	streamsEnd   = "<!-- streams:end -->"
)

// streamHolds says what each stream holds; a stream the topology gains
// fails the test until it is described here (and so in EVENTS.md).
var streamHolds = map[string]string{
	events.EventStream: "the log: every event, plus the confirmations' deadlines (below)",
	events.DLQStream:   "refused messages: the original bytes and headers with the reason (`Heed-Dlq-Code`, `Heed-Dlq-Reason`)",
}

// streamsTable is the streams as events.Provision makes them with the
// default topology.
func streamsTable(t *testing.T) string {
	var b strings.Builder
	b.WriteString("| stream | subjects | holds | kept | duplicate window |\n|---|---|---|---|---|\n")
	topo := events.DefaultTopology()
	for _, cfg := range []jetstream.StreamConfig{topo.EventStreamConfig(), topo.DLQStreamConfig()} {
		holds, ok := streamHolds[cfg.Name]
		if !ok {
			t.Errorf("stream %s is not described in streamHolds (events/catalog_doc_test.go)", cfg.Name)
		}
		kept := "forever"
		if cfg.MaxAge > 0 {
			kept = fmt.Sprintf("%d days", int(cfg.MaxAge/(24*time.Hour)))
		}
		if cfg.MaxBytes > 0 {
			kept += fmt.Sprintf(", at most %d GiB (oldest dropped first)", cfg.MaxBytes>>30)
		}
		subjects := "`" + strings.Join(cfg.Subjects, "`, `") + "`"
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %d minutes |\n", cfg.Name, subjects, holds, kept, int(cfg.Duplicates/time.Minute))
	}
	return b.String()
}

// TestEventsDocStreams: docs/EVENTS.md lists every stream with the
// subjects, retention and duplicate window events.Provision gives it, and
// docs/OPERATIONS.md and docs/ARCHITECTURE.md name every stream, every
// subject it captures and every bucket, so none of them goes stale when
// the topology changes.
func TestEventsDocStreams(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, streamsBegin), strings.Index(s, streamsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s … %s section", docPath, streamsBegin, streamsEnd)
	}
	table := streamsTable(t)
	if *updateDoc {
		s = s[:i+len(streamsBegin)] + "\n" + table + s[j:]
		if err := os.WriteFile(docPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if strings.TrimSpace(s[i+len(streamsBegin):j]) != strings.TrimSpace(table) {
		t.Errorf("the streams table in %s is out of date; run: go test ./events -run EventsDoc -update-doc", docPath)
	}
	topo := events.DefaultTopology()
	for _, name := range []string{"../docs/OPERATIONS.md", "../docs/ARCHITECTURE.md"} {
		doc, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, cfg := range []jetstream.StreamConfig{topo.EventStreamConfig(), topo.DLQStreamConfig()} {
			if !strings.Contains(string(doc), cfg.Name) {
				t.Errorf("%s does not name the stream %s", name, cfg.Name)
			}
			if name == "../docs/OPERATIONS.md" && cfg.Name == events.EventStream {
				for _, subj := range cfg.Subjects {
					if !strings.Contains(string(doc), "`"+subj+"`") {
						t.Errorf("%s does not list the subject `%s` of %s", name, subj, cfg.Name)
					}
				}
			}
		}
		for _, b := range readmodel.Buckets() {
			if !strings.Contains(string(doc), b.Name) {
				t.Errorf("%s does not name the bucket %s", name, b.Name)
			}
		}
	}
}
