package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is the debounce used when a non-positive one is given.
const DefaultDebounce = 100 * time.Millisecond

// Watcher reloads a configuration file when it changes on disk and when
// [Watcher.Reload] is called (the binary calls it on SIGHUP).
//
// Each valid new configuration goes to onChange; each invalid one goes to
// onError with all its errors joined (as from [Load]), and the caller keeps
// serving the configuration it has. onError also receives read errors (a
// deleted file) and errors of the file watcher itself (an event queue
// overflow, after which the file is re-read). Callbacks run one at a time on the
// goroutine that called [Watcher.Run], never after Run has returned; a slow
// callback delays the next reload, it does not race with it.
//
// How changes are detected:
//   - The file's directory is watched, not the file: editors save by
//     writing a new file and renaming it over the old one, and Kubernetes
//     ConfigMap volumes swap a "..data" symlink. If the path is a symlink,
//     the directory of its target is watched too.
//   - Events are coalesced: a reload happens once no event has arrived for
//     the debounce interval (and at the latest 10 debounce intervals after
//     the first event of a burst, so a busy directory cannot starve it).
//   - A file whose bytes hash equals the last applied configuration is
//     skipped, unless a file was rejected since (then the file on disk is
//     valid again, and it is delivered again so the caller can say so);
//     a repeat of the same invalid file is skipped too (reported once).
//   - Reload always reads and parses the file and delivers the result, even
//     when unchanged: an operator who sends SIGHUP gets an answer.
type Watcher struct {
	path     string
	debounce time.Duration
	onChange func(*Config)
	onError  func(error)
	lookup   func(string) (string, bool)

	reload  chan struct{}
	running atomic.Bool

	mu         sync.Mutex
	applied    [sha256.Size]byte // hash of the last applied file
	hasApplied bool
	lastFailed string // hash or read error of the last rejected file

	onCheck func(checkResult) // test hook, called after every check
}

type checkResult int

const (
	checkApplied checkResult = iota
	checkUnchanged
	checkFailed
)

// NewWatcher returns a Watcher for the file at path. debounce <= 0 means [DefaultDebounce]. Nil
// callbacks are allowed (the event is dropped). API keys are read from the
// process environment at each load.
func NewWatcher(path string, debounce time.Duration, onChange func(*Config), onError func(error)) *Watcher {
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	if onChange == nil {
		onChange = func(*Config) {}
	}
	if onError == nil {
		onError = func(error) {}
	}
	return &Watcher{
		path:     path,
		debounce: debounce,
		onChange: onChange,
		onError:  onError,
		lookup:   os.LookupEnv,
		reload:   make(chan struct{}, 1),
	}
}

// Watch runs a [Watcher] until ctx is cancelled. onChange first receives
// the configuration found when watching starts (or onError its errors),
// then every change. It returns nil once ctx is cancelled, or an error if
// the directory cannot be watched. Use [NewWatcher] to also get Reload and
// to load the first configuration synchronously.
func Watch(ctx context.Context, path string, debounce time.Duration, onChange func(*Config), onError func(error)) error {
	return NewWatcher(path, debounce, onChange, onError).Run(ctx)
}

// Load reads and parses the file now, without calling the callbacks, and
// when it is valid records it as applied so that Run does not deliver the
// same bytes again. Use it for the first configuration at startup, where an
// error is fatal, then start Run.
func (w *Watcher) Load() (*Config, error) {
	data, err := readFile(w.path)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseWithEnv(w.path, data, w.lookup)
	if err != nil {
		return nil, err
	}
	cfg.Path = w.path
	w.mu.Lock()
	w.applied, w.hasApplied = sha256.Sum256(data), true
	w.mu.Unlock()
	return cfg, nil
}

// Reload asks the running watcher to reload the file now. It never blocks;
// requests made while one is pending are merged. A request made before Run
// starts is served once Run is watching.
func (w *Watcher) Reload() {
	select {
	case w.reload <- struct{}{}:
	default:
	}
}

// Run watches until ctx is cancelled and then returns nil. Once the watch is
// set up it checks the file a first time, which delivers the current
// configuration unless [Watcher.Load] already returned the same bytes. Run
// returns an error if the file's directory cannot be watched, or if Run is
// already running.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("config: watcher is already running")
	}
	defer w.running.Store(false)

	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	defer fsw.Close()

	abs, err := filepath.Abs(w.path)
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	dir := filepath.Dir(abs)
	if err := fsw.Add(dir); err != nil {
		return fmt.Errorf("watch config directory: %w", err)
	}
	target := "" // directory of the symlink target, when it differs
	syncTarget := func() {
		real, err := filepath.EvalSymlinks(abs)
		t := ""
		if err == nil && filepath.Dir(real) != dir {
			t = filepath.Dir(real)
		}
		if t == target {
			return
		}
		if target != "" {
			_ = fsw.Remove(target) // may be gone already (ConfigMap swap)
		}
		target = ""
		if t != "" && fsw.Add(t) == nil {
			target = t
		}
	}
	syncTarget()

	w.check(ctx, false)

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var burstStart time.Time // zero when no reload is pending
	schedule := func() {
		now := time.Now()
		if burstStart.IsZero() {
			burstStart = now
		}
		deadline := now.Add(w.debounce)
		if latest := burstStart.Add(10 * w.debounce); deadline.After(latest) {
			deadline = latest
		}
		timer.Reset(time.Until(deadline))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fsw.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			schedule()
		case err, ok := <-fsw.Errors:
			if !ok {
				return nil
			}
			// Usually an event queue overflow: events may be lost, so look.
			if ctx.Err() == nil {
				w.onError(fmt.Errorf("watch config: %w", err))
			}
			schedule()
		case <-timer.C:
			burstStart = time.Time{}
			w.check(ctx, false)
			syncTarget()
		case <-w.reload:
			timer.Stop()
			burstStart = time.Time{}
			w.check(ctx, true)
			syncTarget()
		}
	}
}

// check reads and parses the file and calls the callbacks. Unless force,
// a file equal to the last applied one or to the last rejected one is
// skipped.
func (w *Watcher) check(ctx context.Context, force bool) {
	if ctx.Err() != nil {
		return
	}
	result := checkFailed
	defer func() {
		if w.onCheck != nil {
			w.onCheck(result)
		}
	}()

	data, err := readFile(w.path)
	if err != nil {
		w.reject(force, "read:"+err.Error(), err)
		return
	}
	sum := sha256.Sum256(data)
	w.mu.Lock()
	unchanged := w.hasApplied && sum == w.applied
	// Back to the applied file after a rejected one: deliver it again, so
	// that the caller can record that the file on disk is valid and in
	// force (the reload metrics said "rejected" until then).
	recovered := unchanged && w.lastFailed != ""
	if unchanged {
		w.lastFailed = "" // report the next failure again
	}
	w.mu.Unlock()
	if unchanged && !force && !recovered {
		result = checkUnchanged
		return
	}
	cfg, err := ParseWithEnv(w.path, data, w.lookup)
	if err != nil {
		w.reject(force, fmt.Sprintf("hash:%x", sum), err)
		return
	}
	cfg.Path = w.path
	w.mu.Lock()
	w.applied, w.hasApplied, w.lastFailed = sum, true, ""
	w.mu.Unlock()
	result = checkApplied
	w.onChange(cfg)
}

// reject reports err unless the same failure (key) was just reported.
func (w *Watcher) reject(force bool, key string, err error) {
	w.mu.Lock()
	repeat := w.lastFailed == key
	w.lastFailed = key
	w.mu.Unlock()
	if !repeat || force {
		w.onError(err)
	}
}
