package adaptive

import (
	"slices"
	"time"
)

// maxWindowSamples bounds the memory of one delay window. A window holds
// about Window x request rate samples (2 s x 1000 req/s = 2000); past the
// bound further samples still count towards closing and towards the
// maximum in-flight, but the median is taken over the first
// maxWindowSamples, which is plenty for a median.
const maxWindowSamples = 4096

// delayWindow gathers prompt-normalised TTFT samples until it may close:
// at least length has passed since it opened AND it holds at least need
// samples. Per-request TTFT is noisy (lognormal jitter, prompt sizes), and
// fed one by one it lets noise, not capacity, set Gradient2's limit
// (design.md §2); a window median is a sample the library can use.
//
// Not safe for concurrent use: the controller's mutex guards it.
type delayWindow struct {
	length      time.Duration
	need        int
	start       time.Time
	vals        []time.Duration
	count       int
	maxInflight int
}

func newDelayWindow(length time.Duration, need int, now time.Time) delayWindow {
	return delayWindow{
		length: length,
		need:   need,
		start:  now,
		vals:   make([]time.Duration, 0, min(max(need, 16), maxWindowSamples)),
	}
}

// add records one normalised TTFT and the in-flight count its request was
// dispatched with.
func (w *delayWindow) add(ttft time.Duration, inflight int) {
	w.count++
	if len(w.vals) < maxWindowSamples {
		w.vals = append(w.vals, ttft)
	}
	w.maxInflight = max(w.maxInflight, inflight)
}

// ready reports whether the window may close at now.
func (w *delayWindow) ready(now time.Time) bool {
	return w.count >= w.need && now.Sub(w.start) >= w.length
}

// close returns the median TTFT and the maximum in-flight of the window and
// opens the next one at now. With an even count the median is the mean of
// the two middle values.
func (w *delayWindow) close(now time.Time) (median time.Duration, maxInflight int) {
	slices.Sort(w.vals)
	n := len(w.vals)
	if n%2 == 1 {
		median = w.vals[n/2]
	} else {
		median = w.vals[n/2-1] + (w.vals[n/2]-w.vals[n/2-1])/2
	}
	maxInflight = w.maxInflight
	w.reset(now)
	return median, maxInflight
}

// reset discards the samples and opens a new window at now.
func (w *delayWindow) reset(now time.Time) {
	w.vals = w.vals[:0]
	w.count = 0
	w.maxInflight = 0
	w.start = now
}
