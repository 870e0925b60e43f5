// Package archtest holds the rules of heed's layout as tests: who may
// import whom. The layout is the architecture (docs/ARCHITECTURE.md): a
// thin contract (events, schemas), shared libraries (lib), a client for
// everything outside the services, and services that talk only through
// events, so any of them can run as its own process.
package archtest

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const mod = "github.com/heedhq/heed/"

// root is the repository root (tools/internal/archtest → ../../..).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.work")); err != nil {
		t.Fatalf("no go.work at %s: %v", r, err)
	}
	return r
}

// layer names the part of the repository an import path belongs to:
// events, schemas, lib, client, tools, conformance, examples, or
// services/<name>.
func layer(path string) string {
	rest, ok := strings.CutPrefix(path, mod)
	if !ok {
		return ""
	}
	parts := strings.Split(rest, "/")
	if parts[0] == "services" && len(parts) > 1 {
		return "services/" + parts[1]
	}
	return parts[0]
}

// allowed says whether a package of layer from may depend (directly or
// not) on a package of layer to.
func allowed(from, to string) bool {
	if from == to || to == "" {
		return true
	}
	switch {
	case from == "schemas":
		return false
	case from == "events":
		return to == "schemas"
	case from == "lib":
		return to == "events" || to == "schemas"
	case from == "client":
		return to == "events" || to == "schemas" || to == "lib"
	case strings.HasPrefix(from, "services/"):
		// The contract and the shared libraries; never another service,
		// never the client (a service is not a client of heed).
		return to == "events" || to == "schemas" || to == "lib"
	case from == "tools":
		return true // checked file by file below
	}
	return false
}

type pkg struct {
	ImportPath string
	Dir        string
	Deps       []string
	Imports    []string
}

// listPackages lists every package of the workspace with its transitive
// dependencies (go list -deps semantics, without tests).
func listPackages(t *testing.T, dir string) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}/...").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	args := append([]string{"list", "-json=ImportPath,Dir,Deps,Imports"}, strings.Fields(string(out))...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

// TestServicesImportOnlyTheContract: no package of a service depends on
// another service or on the client; the contract and the libraries depend
// on no service; the client depends only on the contract and libraries.
func TestServicesImportOnlyTheContract(t *testing.T) {
	r := root(t)
	seen := map[string]bool{}
	for _, p := range listPackages(t, r) {
		from := layer(p.ImportPath)
		seen[from] = true
		for _, d := range p.Deps {
			if to := layer(d); !allowed(from, to) {
				t.Errorf("%s depends on %s (%s may use only the contract and lib; see docs/ARCHITECTURE.md)", p.ImportPath, d, from)
			}
		}
	}
	for _, want := range []string{"events", "lib", "client", "services/runner", "services/confirm", "services/healer", "services/learner", "services/indexer", "tools"} {
		if !seen[want] {
			t.Errorf("go list saw no package of %s: the test would pass vacuously", want)
		}
	}
}

// wiring are the files of tools/ that start services in-process, as heed
// up does, and so may import their library entry points (the root package
// of a service, nothing under it).
var wiring = map[string]bool{
	"tools/heed/up.go":          true, // heed up: every service in one process
	"tools/heed/replay.go":      true, // heed replay: the services' projections over the log
	"tools/internal/sim/sim.go": true, // the load generator runs every service
	"tools/bench/services.go":   true, // benchmarks of each service
	// The bridges' tests start the confirm router, the indexer and the
	// runner beside the bridge under test; the bridges themselves use
	// only the client.
	"tools/bridge/internal/bridgetest/bridgetest.go": true,
	// The console's and the MCP server's tests start every service.
	"tools/internal/heedtest/heedtest.go": true,
}

// TestToolsUseTheClient: the programs under tools/ talk to heed through the
// client package; only the wiring files import services, and only their
// entry points. Outside clients (conformance/, examples/) import no heed
// package at all.
func TestToolsUseTheClient(t *testing.T) {
	r := root(t)
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(r, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != r {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(r, path)
		rel = filepath.ToSlash(rel)
		top := strings.SplitN(rel, "/", 2)[0]
		if top != "tools" && top != "conformance" && top != "examples" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, mod) {
				continue
			}
			if top != "tools" {
				t.Errorf("%s imports %s: an outside client uses only NATS and JSON", rel, p)
				continue
			}
			l := layer(p)
			if !strings.HasPrefix(l, "services/") {
				continue
			}
			test := strings.HasSuffix(rel, "_test.go")
			switch {
			case !wiring[rel] && !test:
				t.Errorf("%s imports %s: tools talk to heed through the client; only heed up's wiring starts services", rel, p)
			case p != mod+l:
				t.Errorf("%s imports %s: only a service's entry point (%s) may be imported", rel, p, mod+l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked only %d files", checked)
	}
}
