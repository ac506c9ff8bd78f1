package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const waitTimeout = 10 * time.Second

// version returns a valid config whose first provider has ceiling n, so
// that tests can tell versions apart.
func version(n int) string {
	return fmt.Sprintf("providers:\n  - name: p\n    upstream: http://localhost:8000\n    match: { path_prefix: /p }\n    limit: { ceiling: %d }\n", n)
}

const badConfig = "providers:\n  - name: p\n    upstream: http://localhost:8000\n    match: { path_prefix: /p }\n    limit: { ceiling: 0 }\n"

type harness struct {
	t       *testing.T
	dir     string
	path    string
	w       *Watcher
	changes chan *Config
	errs    chan error
	checks  chan checkResult
	cancel  context.CancelFunc
	done    chan error
}

// newHarness creates dir/sluice.yaml with content and a Watcher on it
// (debounce 20ms unless given), without running it.
func newHarness(t *testing.T, content string, debounce time.Duration) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{
		t:       t,
		dir:     dir,
		path:    filepath.Join(dir, "sluice.yaml"),
		changes: make(chan *Config, 100),
		errs:    make(chan error, 100),
		checks:  make(chan checkResult, 1000),
	}
	if content != "" {
		h.write(content)
	}
	if debounce == 0 {
		debounce = 20 * time.Millisecond
	}
	h.w = NewWatcher(h.path, debounce, func(c *Config) { h.changes <- c }, func(err error) { h.errs <- err })
	h.w.onCheck = func(r checkResult) { h.checks <- r }
	return h
}

// run starts the watcher and waits until its first check, i.e. until the
// directory is watched. The cleanup cancels it and checks for leaks.
func (h *harness) run() checkResult {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.w.Run(ctx) }()
	h.t.Cleanup(h.stop)
	return h.check()
}

func (h *harness) stop() {
	h.t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run returned %v after cancel, want nil", err)
		}
	case <-time.After(waitTimeout):
		h.t.Fatal("Run did not return after cancel")
	}
	goleak.VerifyNone(h.t)
}

// write replaces the file in place (truncate and write).
func (h *harness) write(content string) {
	h.t.Helper()
	if err := os.WriteFile(h.path, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// replace writes a temporary file and renames it over the config, as
// editors do.
func (h *harness) replace(content string) {
	h.t.Helper()
	tmp := filepath.Join(h.dir, ".sluice.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, h.path); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) check() checkResult {
	h.t.Helper()
	select {
	case r := <-h.checks:
		return r
	case <-time.After(waitTimeout):
		h.t.Fatal("timed out waiting for a check")
		return 0
	}
}

// waitCeiling waits for a delivered config with the given ceiling. Errors
// in between are tolerated only if allowErrors (an in-place write can be
// read half-written); other configs fail the test.
func (h *harness) waitCeiling(ceiling int, allowErrors bool) *Config {
	h.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case c := <-h.changes:
			if got := c.Providers[0].Limit.Ceiling; got != ceiling {
				h.t.Fatalf("got config with ceiling %d, want %d", got, ceiling)
			}
			if c.Path != h.path {
				h.t.Errorf("Path = %q, want %q", c.Path, h.path)
			}
			return c
		case err := <-h.errs:
			if !allowErrors {
				h.t.Fatalf("unexpected error: %v", err)
			}
		case <-deadline:
			h.t.Fatalf("timed out waiting for ceiling %d", ceiling)
		}
	}
}

func (h *harness) waitError() error {
	h.t.Helper()
	select {
	case err := <-h.errs:
		return err
	case c := <-h.changes:
		h.t.Fatalf("got config with ceiling %d, want an error", c.Providers[0].Limit.Ceiling)
	case <-time.After(waitTimeout):
		h.t.Fatal("timed out waiting for an error")
	}
	return nil
}

// waitResult drains checks until one with result r.
func (h *harness) waitResult(r checkResult) {
	h.t.Helper()
	for h.check() != r {
	}
}

func (h *harness) assertQuiet() {
	h.t.Helper()
	select {
	case c := <-h.changes:
		h.t.Fatalf("unexpected config with ceiling %d", c.Providers[0].Limit.Ceiling)
	case err := <-h.errs:
		h.t.Fatalf("unexpected error: %v", err)
	default:
	}
}

func TestWatchWrite(t *testing.T) {
	h := newHarness(t, version(1), 0)
	cfg, err := h.w.Load()
	if err != nil || cfg.Providers[0].Limit.Ceiling != 1 || cfg.Path != h.path {
		t.Fatalf("Load: %+v, %v", cfg, err)
	}
	if r := h.run(); r != checkUnchanged {
		t.Fatalf("first check after Load = %v, want unchanged", r)
	}
	h.assertQuiet()
	h.write(version(2))
	h.waitCeiling(2, true)
	h.write(version(3))
	h.waitCeiling(3, true)
}

func TestWatchRenameReplace(t *testing.T) {
	h := newHarness(t, version(1), 0)
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.run()
	h.replace(version(2))
	h.waitCeiling(2, false)
	// The watch survives the replacement of the file.
	h.replace(version(3))
	h.waitCeiling(3, false)
}

func TestWatchBadWrite(t *testing.T) {
	h := newHarness(t, version(1), 0)
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.run()

	h.replace(badConfig)
	err := h.waitError()
	if want := h.path + ":5: providers[0].limit.ceiling: must be between 1 and 100000, got 0"; !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	h.waitResult(checkFailed)
	h.assertQuiet()

	// The same bad bytes again are not reported twice.
	h.replace(badConfig)
	h.waitResult(checkFailed)
	h.assertQuiet()

	// Back to the applied config: delivered again (the caller records that
	// the file on disk is in force again, issue 9); a new bad file is
	// reported again afterwards.
	h.replace(version(1))
	h.waitCeiling(1, false)
	h.replace(version(1))
	h.waitResult(checkUnchanged)
	h.assertQuiet()
	h.replace(badConfig)
	h.waitError()

	// A fix is delivered.
	h.replace(version(2))
	h.waitCeiling(2, false)
}

func TestWatchUnchangedRewrite(t *testing.T) {
	h := newHarness(t, version(1), 0)
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.run()
	h.replace(version(1))
	h.waitResult(checkUnchanged)
	h.assertQuiet()
	h.write(version(1)) // in place: may be seen half-written, then whole
	for r := h.check(); r != checkUnchanged; r = h.check() {
		if r == checkApplied {
			// Only after a half-written read was rejected: the whole file
			// is then valid again, and is delivered again.
			select {
			case <-h.errs:
			default:
				t.Fatal("unchanged file delivered without a rejection before it")
			}
			<-h.changes
			break
		}
	}
	select {
	case c := <-h.changes:
		t.Fatalf("unchanged file delivered (ceiling %d)", c.Providers[0].Limit.Ceiling)
	default:
	}
}

func TestWatchReload(t *testing.T) {
	h := newHarness(t, version(1), time.Hour) // no file event can fire in time
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.w.Reload() // before Run: served once Run is watching
	h.run()
	// An explicit reload delivers even an unchanged file.
	h.waitCeiling(1, false)
	h.w.Reload()
	h.waitCeiling(1, false)
	// And reads the file now, without waiting for the debounce.
	h.replace(version(7))
	h.w.Reload()
	h.waitCeiling(7, false)
	// A bad file is reported on every explicit reload.
	h.replace(badConfig)
	h.w.Reload()
	h.waitError()
	h.w.Reload()
	h.waitError()
}

func TestWatchFuncDeliversInitialConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(version(4)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan *Config, 10)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, path, 0, func(c *Config) { changes <- c }, func(err error) { t.Errorf("onError: %v", err) })
	}()
	select {
	case c := <-changes:
		if c.Providers[0].Limit.Ceiling != 4 {
			t.Errorf("ceiling = %d, want 4", c.Providers[0].Limit.Ceiling)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no initial config")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Watch returned %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Watch did not return after cancel")
	}
	goleak.VerifyNone(t)
}

func TestWatchInitialBadFile(t *testing.T) {
	h := newHarness(t, badConfig, 0)
	if _, err := h.w.Load(); err == nil {
		t.Fatal("Load accepted a bad file")
	}
	if r := h.run(); r != checkFailed {
		t.Fatalf("first check = %v, want failed", r)
	}
	h.waitError()
	h.replace(version(2))
	h.waitCeiling(2, false)
}

func TestWatchRemovedAndRecreated(t *testing.T) {
	h := newHarness(t, version(1), 0)
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.run()
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	if err := h.waitError(); !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("got %v, want a not-exist error", err)
	}
	h.replace(version(2))
	h.waitCeiling(2, false)
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// TestWatchConfigMapSwap mimics a Kubernetes ConfigMap volume: the file is
// a symlink into "..data", itself a symlink to a timestamped directory that
// is replaced on update.
func TestWatchConfigMapSwap(t *testing.T) {
	h := newHarness(t, "", 0)
	mkVersion := func(name, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(h.dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.dir, name, "sluice.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(target string) {
		t.Helper()
		tmp := filepath.Join(h.dir, "..data_tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(h.dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	mkVersion("..2024_01", version(1))
	swap("..2024_01")
	if err := os.Symlink(filepath.Join("..data", "sluice.yaml"), h.path); err != nil {
		t.Fatal(err)
	}
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.run()

	mkVersion("..2024_02", version(2))
	swap("..2024_02")
	if err := os.RemoveAll(filepath.Join(h.dir, "..2024_01")); err != nil {
		t.Fatal(err)
	}
	h.waitCeiling(2, false)

	mkVersion("..2024_03", version(3))
	swap("..2024_03")
	if err := os.RemoveAll(filepath.Join(h.dir, "..2024_02")); err != nil {
		t.Fatal(err)
	}
	h.waitCeiling(3, false)
}

// TestWatchSymlinkTarget: when the config is a symlink to a file in another
// directory, edits to the target are seen too.
func TestWatchSymlinkTarget(t *testing.T) {
	h := newHarness(t, "", 0)
	other := t.TempDir()
	target := filepath.Join(other, "real.yaml")
	if err := os.WriteFile(target, []byte(version(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, h.path); err != nil {
		t.Fatal(err)
	}
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.run()
	tmp := filepath.Join(other, "real.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(version(5)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
	h.waitCeiling(5, false)
}

func TestWatchCoalescesBursts(t *testing.T) {
	// A long debounce: the burst below takes microseconds, so all its
	// events fall into one window and only the last version is read.
	h := newHarness(t, version(1), 500*time.Millisecond)
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.run()
	for n := 2; n <= 6; n++ {
		h.replace(version(n))
	}
	h.waitCeiling(6, false)
	h.assertQuiet()
}

func TestWatchRunTwiceAndBadDir(t *testing.T) {
	h := newHarness(t, version(1), 0)
	h.run()
	if err := h.w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run = %v, want already running", err)
	}
	h.stop()

	// Once stopped, it can run again.
	h.run()
	h.stop()

	w := NewWatcher(filepath.Join(t.TempDir(), "missing", "sluice.yaml"), 0, nil, nil)
	if err := w.Run(context.Background()); err == nil {
		t.Error("Run on a missing directory returned nil")
	}
	goleak.VerifyNone(t)
}

func TestWatchCancelStopsCallbacks(t *testing.T) {
	h := newHarness(t, version(1), 0)
	if _, err := h.w.Load(); err != nil {
		t.Fatal(err)
	}
	h.run()
	h.stop()
	// After Run returned, file changes and Reload reach no callback.
	h.replace(version(2))
	h.w.Reload()
	h.assertQuiet()
	goleak.VerifyNone(t)
}
