package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The import rules of the repository layout (docs/architecture.md). Data
// flows one way, config -> proxy -> adaptive <- feedback; config and
// adaptive share the settings types (settings imports nothing of ours);
// the limit maths (adaptive/control) knows nothing but those types and the
// token bucket it shares with the rate layer; bench drives the product
// from outside. The rules live here because cmd/sluice is the
// product binary: it wires every product package, so its test is where a
// rule broken anywhere in the product shows up.
//
// Each rule is checked on a package's non-test imports and everything they
// import in turn, so a rule cannot be dodged through a package in between.
// Imports made only by _test.go files are not counted: a test may use
// bench's simulator without putting it in the binary. The import graph
// comes from `go list -deps`, run with the go command that runs the test
// (go test puts its own GOROOT/bin first on PATH).

const module = "github.com/sluicehq/sluice"

// layoutRule forbids the packages under any of from to depend on a package
// that forbidden matches.
type layoutRule struct {
	name      string
	from      []string // module-relative directories; each covers its subpackages
	forbidden func(importPath string) bool
}

var layoutRules = []layoutRule{
	{
		name:      "settings and feedback import nothing of ours",
		from:      []string{"settings", "feedback"},
		forbidden: func(p string) bool { return under(p, module) },
	},
	{
		name:      "config imports nothing of ours but settings",
		from:      []string{"config"},
		forbidden: func(p string) bool { return under(p, module) && !under(p, module+"/settings") },
	},
	{
		name: "adaptive imports no fasthttp, no OpenTelemetry and not config",
		from: []string{"adaptive"},
		forbidden: func(p string) bool {
			return strings.HasPrefix(p, "github.com/valyala/fasthttp") ||
				under(p, "go.opentelemetry.io") ||
				under(p, module+"/config")
		},
	},
	{
		name: "adaptive/control imports nothing of ours but the settings types and adaptive/internal/bucket",
		from: []string{"adaptive/control"},
		forbidden: func(p string) bool {
			return under(p, module) && p != module+"/adaptive/internal/bucket" && p != module+"/settings"
		},
	},
	{
		name:      "adaptive/internal/bucket imports nothing of ours",
		from:      []string{"adaptive/internal/bucket"},
		forbidden: func(p string) bool { return under(p, module) },
	},
	{
		name:      "nothing in the product imports bench",
		from:      []string{"cmd/sluice", "proxy", "adaptive", "feedback", "config", "settings"},
		forbidden: func(p string) bool { return under(p, module+"/bench") },
	},
	{
		name:      "internal/testutil imports nothing of ours",
		from:      []string{"internal/testutil"},
		forbidden: func(p string) bool { return under(p, module) },
	},
	{
		name:      "internal/vtime imports nothing of ours",
		from:      []string{"internal/vtime"},
		forbidden: func(p string) bool { return under(p, module) },
	},
	{
		name:      "only tests import internal/testutil, internal/vtime and internal/controltest",
		from:      []string{"cmd", "proxy", "adaptive", "feedback", "config", "settings", "bench"},
		forbidden: func(p string) bool { return under(p, module+"/internal") },
	},
}

// under reports whether import path p is dir or a package below it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// listedPackage is the part of `go list -json` output the rules need.
type listedPackage struct {
	ImportPath string
	Imports    []string // direct, non-test
}

func TestImportRules(t *testing.T) {
	t.Parallel()
	pkgs := goListDeps(t, module+"/...")
	for _, rule := range layoutRules {
		for _, dir := range rule.from {
			checked := 0
			for _, p := range pkgs {
				if !under(p.ImportPath, module+"/"+dir) {
					continue
				}
				checked++
				for _, chain := range forbiddenImports(pkgs, p.ImportPath, rule.forbidden) {
					t.Errorf("%s: %s depends on %s: %s", rule.name, short(p.ImportPath),
						chain[len(chain)-1], strings.Join(chain, " -> "))
				}
			}
			// A rule that matches no package would pass forever after a
			// rename; say so instead.
			if checked == 0 {
				t.Errorf("%s: no package under %s/%s", rule.name, module, dir)
			}
		}
	}
}

// goListDeps runs `go list -deps -json` on patterns: every matched package
// and every package they depend on, keyed by import path. Only non-test
// imports are listed (no -test flag).
func goListDeps(t *testing.T, patterns ...string) map[string]*listedPackage {
	t.Helper()
	args := append([]string{"list", "-deps", "-json=ImportPath,Imports"}, patterns...)
	cmd := exec.Command("go", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	pkgs := map[string]*listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs[p.ImportPath] = &p
	}
	if len(pkgs) == 0 {
		t.Fatal("go list listed no packages")
	}
	return pkgs
}

// forbiddenImports walks the non-test imports of package from, breadth
// first, and returns the shortest import chain to each forbidden package it
// reaches. It does not walk past a forbidden package, so a violation is
// reported once, where the chain first leaves the rule (adaptive -> config),
// not again for every package behind it.
func forbiddenImports(pkgs map[string]*listedPackage, from string, forbidden func(string) bool) [][]string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	var chains [][]string
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur != from && forbidden(cur) {
			var chain []string
			for p := cur; p != ""; p = prev[p] {
				chain = append(chain, short(p))
			}
			slices.Reverse(chain)
			chains = append(chains, chain)
			continue
		}
		p := pkgs[cur]
		if p == nil {
			continue // not listed: go list -deps lists every dependency
		}
		for _, next := range p.Imports {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return chains
}

// short drops the module path from our own import paths.
func short(p string) string {
	if s, ok := strings.CutPrefix(p, module+"/"); ok {
		return s
	}
	return p
}
