package bucket

import (
	"testing"
	"time"
)

// TestBucketRetimeKeepsTheNextFreeTime: a retime (a pace that changed)
// keeps the time at which the bucket is free again, where a resize keeps
// the tokens in use; from off, both start full.
func TestBucketRetimeKeepsTheNextFreeTime(t *testing.T) {
	t.Parallel()
	var b Bucket
	now := int64(1000) * TicksPerNs
	b.Retime(now, 1, time.Second)
	for i, want := range []time.Duration{0, time.Second, 2 * time.Second} {
		if w, ok, _, on := b.Reserve(now, 1, MaxTicks); !ok || !on || DurationOf(w) != want {
			t.Fatalf("slot %d: wait %v ok %v on %v, want %v", i, DurationOf(w), ok, on, want)
		}
	}
	// Three slots given: the next is free 3 s from now, whatever the new
	// spacing; the one after comes at the new spacing.
	b.Retime(now, 1, 2*time.Second)
	for i, want := range []time.Duration{3 * time.Second, 5 * time.Second} {
		if w, _, _, _ := b.Reserve(now, 1, MaxTicks); DurationOf(w) != want {
			t.Fatalf("after the retime, slot %d: wait %v, want %v", i, DurationOf(w), want)
		}
	}
	// A resize instead carries the slots in use over at the new spacing.
	var r Bucket
	r.Resize(now, 1, time.Second)
	r.Reserve(now, 1, MaxTicks)
	r.Reserve(now, 1, MaxTicks)
	r.Resize(now, 1, 2*time.Second)
	if w, _, _, _ := r.Reserve(now, 1, MaxTicks); DurationOf(w) != 4*time.Second {
		t.Fatalf("after a resize: wait %v, want 4s (two slots in use at 2 s)", DurationOf(w))
	}
	b.Stop()
	b.Retime(now+TicksOf(time.Hour), 1, time.Second)
	if w, ok, _, _ := b.Reserve(now+TicksOf(time.Hour), 1, 0); !ok || w != 0 {
		t.Fatalf("retimed from off: wait %v ok %v, want a free slot", DurationOf(w), ok)
	}
}
