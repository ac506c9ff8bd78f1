package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binaries are the commands tests start as processes, each with the
// environment variable that names a build of it. make builds both once
// (make build) and sets the variables, so that the tests of several
// packages share one build; the deploy checks set the same variables to
// their static build.
var binaries = map[string]string{
	"sluice":       "SLUICE_BIN",
	"sluice-bench": "SLUICE_BENCH_BIN",
}

var built struct {
	sync.Mutex
	dir   string
	paths map[string]string
	errs  map[string]error
}

// Binary returns the path of the command cmd/name (sluice or
// sluice-bench): the file its environment variable names when that is
// set, else a build of it made the first time a test of this process asks
// (go build, without the race detector: the binary is what the test
// drives, not what it checks for races), so that `go test` alone still
// runs every test. Builds made here are removed by M.
func Binary(t testing.TB, name string) string {
	t.Helper()
	env, ok := binaries[name]
	if !ok {
		t.Fatalf("testutil.Binary: no command %q", name)
	}
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", env, p, err)
		}
		return p
	}
	built.Lock()
	defer built.Unlock()
	if p, ok := built.paths[name]; ok {
		return p
	}
	if err, ok := built.errs[name]; ok {
		t.Fatal(err) // the build failed for an earlier test: do not build again
	}
	p, err := build(name)
	if err != nil {
		if built.errs == nil {
			built.errs = map[string]error{}
		}
		built.errs[name] = err
		t.Fatal(err)
	}
	if built.paths == nil {
		built.paths = map[string]string{}
	}
	built.paths[name] = p
	return p
}

// build compiles cmd/name into the process's build directory. The go
// command is the one that runs the test: go test puts its GOROOT/bin first
// on PATH.
func build(name string) (string, error) {
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "sluice-test-bin")
		if err != nil {
			return "", err
		}
		built.dir = dir
	}
	p := filepath.Join(built.dir, name)
	out, err := exec.Command("go", "build", "-o", p, "github.com/sluicehq/sluice/cmd/"+name).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build cmd/%s (or set %s): %v\n%s", name, binaries[name], err, out)
	}
	return p, nil
}

// M wraps a package's tests so that their Run, once the tests are done,
// removes the binaries Binary built:
//
//	func TestMain(m *testing.M) { os.Exit(testutil.M(m).Run()) }
//
// or, with goleak, goleak.VerifyTestMain(testutil.M(m), ...).
func M(m interface{ Run() int }) interface{ Run() int } { return removing{m} }

type removing struct{ m interface{ Run() int } }

func (r removing) Run() int {
	code := r.m.Run()
	built.Lock()
	if built.dir != "" {
		os.RemoveAll(built.dir)
		built.dir, built.paths = "", nil
	}
	built.Unlock()
	return code
}
