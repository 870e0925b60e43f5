package events_test

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/heedhq/heed/events"
	"github.com/heedhq/heed/events/command"
	"github.com/heedhq/heed/events/readmodel"
	"github.com/heedhq/heed/schemas"
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
