// Package schemas holds the JSON Schemas (draft 2020-12) of every heed
// contract: the data of each event type (events/<type>.json), the command
// requests services answer (commands/<name>.json) and shared definitions
// (defs.json). The files are the source of truth; Go types follow them.
package schemas

import (
	"embed"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed defs.json events/*.json commands/*.json
var files embed.FS

// BaseURL prefixes every schema's $id, so that $ref between files resolves
// without touching the network.
const BaseURL = "https://heed.dev/schemas/"

// FS returns the embedded schema files.
func FS() fs.FS { return files }

// EventTypes lists the event types that have a schema, sorted.
func EventTypes() []string {
	return names("events")
}

// EventSchemaPath is the path inside FS of the schema for an event type.
func EventSchemaPath(eventType string) string {
	return path.Join("events", eventType+".json")
}

// Commands lists the command subjects that have a schema, sorted.
func Commands() []string {
	return names("commands")
}

// CommandSchemaPath is the path inside FS of the schema for a command
// subject (heed.cmd.run.start).
func CommandSchemaPath(subject string) string {
	return path.Join("commands", subject+".json")
}

func names(dir string) []string {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
