package main

import (
	"go/build"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoBenchInProduct keeps the benchmark code (simulator, scenarios,
// charts, load generator) out of the sluice binary: no package of this
// module's bench/ tree may be among its dependencies. The demo lives in
// sluice-bench for that reason.
func TestNoBenchInProduct(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	// One line per package: import path and, for packages of a module,
	// the module's path.
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	own := 0
	for line := range strings.Lines(string(out)) {
		pkg, mod, _ := strings.Cut(strings.TrimSpace(line), " ")
		if mod == "" || !strings.HasPrefix(pkg, mod+"/") {
			continue
		}
		own++
		if rest := strings.TrimPrefix(pkg, mod+"/"); rest == "bench" || strings.HasPrefix(rest, "bench/") {
			t.Errorf("the sluice binary depends on %s", pkg)
		}
	}
	if own == 0 {
		t.Fatalf("go list -deps found none of this module's packages:\n%s", out)
	}
}
