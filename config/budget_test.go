package config

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// laughs builds a billion-laughs-style file in the shape the audit found
// (a small file that, before the budget, took seconds and gigabytes to
// load; BENCHMARKS.md): one block of many keys anchored once, and a
// provider that uses it aliased many times.
// use is how the provider uses the block: "headers: *h" (an alias),
// "headers: {<<: *h}" (a merge key), "limit: {<<: *h}" (a merge key whose
// every key is unknown there: an error per key and per alias).
func laughs(keys, refs int, use string) []byte {
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:8080\nx-shared: &h {")
	for i := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "h%d: v", i)
	}
	b.WriteString("}\nproviders:\n")
	fmt.Fprintf(&b, "  - &p {name: b, upstream: \"http://x\", match: {path_prefix: /b}, %s}\n", use)
	for range refs {
		b.WriteString("  - *p\n")
	}
	return []byte(b.String())
}

// parseMeasured parses data and returns the bytes allocated and the error.
func parseMeasured(name string, data []byte) (uint64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseWithEnv(name, data, lookupEnv)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}

// Aliases and merge keys expand to at most maxAliasValues values: a file
// that would expand to two million is rejected with one error naming the
// file and the line of the alias where the budget ran out, in bounded
// memory. (Not parallel: it measures the heap allocated while it runs.)
func TestYAMLAliasBudget(t *testing.T) {
	for name, use := range map[string]string{"alias": "headers: *h", "merge": "headers: {<<: *h}"} {
		t.Run(name, func(t *testing.T) {
			data := laughs(2000, 1000, use)
			if len(data) > 40<<10 {
				t.Fatalf("test file is %d bytes; the point is a small file", len(data))
			}
			alloc, err := parseMeasured("laughs.yaml", data)
			if err == nil {
				t.Fatal("accepted")
			}
			if alloc > 64<<20 {
				t.Errorf("allocated %d MiB to reject a %d KB file", alloc>>20, len(data)>>10)
			}
			errs := unjoin(err)
			var budget *FieldError
			for _, e := range errs {
				if fe, ok := e.(*FieldError); ok && strings.Contains(fe.Msg, "aliases") {
					budget = fe
				}
			}
			if budget == nil {
				t.Fatalf("no alias budget error among %d errors; first: %v", len(errs), errs[0])
			}
			if len(errs) > 10 {
				t.Errorf("%d errors; decoding should stop at the budget", len(errs))
			}
			line := strings.Split(string(data), "\n")[budget.Line-1]
			if budget.File != "laughs.yaml" || !strings.Contains(line, "*p") {
				t.Errorf("error %q points at line %d (%q), want an alias line of laughs.yaml", budget, budget.Line, line)
			}
			if !strings.HasPrefix(budget.Error(), "laughs.yaml:"+strconv.Itoa(budget.Line)+": providers[") {
				t.Errorf("error %q: want FILE:LINE: providers[N]...", budget)
			}
		})
	}
	// Errors repeated by aliases stop at maxDecodeErrors.
	t.Run("errors", func(t *testing.T) {
		data := laughs(2000, 1000, "limit: {<<: *h}")
		alloc, err := parseMeasured("laughs.yaml", data)
		errs := unjoin(err)
		if len(errs) != maxDecodeErrors+1 || !strings.Contains(errs[len(errs)-1].Error(), "more than 200 errors") {
			t.Fatalf("%d errors, last %v; want %d and a last one saying it stopped", len(errs), errs[len(errs)-1], maxDecodeErrors+1)
		}
		if alloc > 64<<20 {
			t.Errorf("allocated %d MiB to reject a %d KB file", alloc>>20, len(data)>>10)
		}
	})
	// Sharing blocks by alias, as configs do, stays far below the budget.
	t.Run("ordinary sharing", func(t *testing.T) {
		data := laughs(10, 500, "headers: *h")
		_, err := ParseWithEnv("shared.yaml", data, lookupEnv)
		for _, e := range unjoin(err) {
			if strings.Contains(e.Error(), "aliases") {
				t.Fatalf("budget hit by 500 aliases of a 10-key block: %v", e)
			}
		}
	})
}

// A file over MaxFileSize is refused before it is parsed, by Load (which
// reads no more than that), the watcher and Parse alike.
func TestConfigFileTooLarge(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "big.yaml")
	data := []byte("# " + strings.Repeat("x", MaxFileSize) + "\n")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "big.yaml: larger than") {
			t.Errorf("%s: err = %v, want big.yaml: larger than ...", what, err)
		}
	}
	_, err := Load(path)
	check("Load", err)
	_, err = NewWatcher(path, 0, nil, nil).Load()
	check("Watcher.Load", err)
	_, err = Parse(path, data)
	check("Parse", err)
}
