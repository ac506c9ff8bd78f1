package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalT records Fatalf instead of ending the test; Eventually returns
// after Fatalf only in this fake.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventually(t *testing.T) {
	t.Parallel()
	n := 0
	took := Eventually(t, "the third poll", time.Second, func() bool { n++; return n == 3 })
	if n != 3 || took >= time.Second {
		t.Fatalf("polled %d times in %v, want 3 within a second", n, took)
	}

	f := &fatalT{TB: t}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		Eventually(f, "never", 20*time.Millisecond, func() bool { return false })
	}()
	<-done
	if !strings.Contains(f.msg, "waiting for never") {
		t.Fatalf("Fatalf %q, want it to name what it waited for", f.msg)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("gave up after %v, before its 20ms", d)
	}
}
