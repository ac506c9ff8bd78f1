package control

import (
	"slices"
	"time"
)

// maxWindowSamples bounds the memory of one delay window. A window holds
// about Window x request rate samples (2 s x 1000 req/s = 2000); past the
// bound further samples still count towards closing and towards the
// in-flight figures, but the statistics are taken over the first
// maxWindowSamples, which is plenty for a median and quartiles.
const maxWindowSamples = 4096

// delayWindow gathers prompt-normalised TTFT samples until it may close:
// at least length has passed since it opened AND it holds at least need
// samples. Per-request TTFT is noisy (lognormal jitter, prompt sizes), and
// fed one by one it lets noise, not capacity, set the limit;
// a window median is a sample the controller can use, and the window's
// quartiles say how noisy it is.
//
// Not safe for concurrent use: the controller's mutex guards it.
type delayWindow struct {
	length time.Duration
	need   int
	// early, when > 0, lets the window close before length has passed
	// once it holds that many samples: after the limit grew by early
	// requests with requests waiting, those requests were dispatched at
	// once, and their first tokens are all the window waits for.
	early int
	// settle is how long the window must have been open before it may
	// close early: long enough for the slower first tokens of the
	// requests dispatched when it opened to come. Closed on its first
	// samples alone, a window holds the quickest first tokens (short
	// prompts, lucky jitter), which at a high request rate arrive within
	// milliseconds: a median biased low.
	settle      time.Duration
	start       time.Time
	vals        []time.Duration
	count       int
	sumInflight int
	maxInflight int
	sumDecoding int
	maxDecoding int
	rates       []float64 // per-stream output tokens/s seen during the window
	refused     bool      // the provider refused a request while the window was open
}

// windowStats is what a closed window measured.
type windowStats struct {
	median time.Duration
	// absDev is the sum over the window's samples of their absolute
	// deviation from its median, seconds. Pooled over windows
	// (reference.noise) it estimates the per-sample spread: a handful of
	// samples per window give a poor spread each, many windows a good one.
	absDev float64
	n      int
	// meanInflight and maxInflight are the in-flight counts the window's
	// requests were dispatched with.
	meanInflight float64
	maxInflight  int
	// rate is the median per-stream output token rate of the token-rate
	// samples seen during the window (0 = none), rates how many there were.
	rate  float64
	rates int
	// decoding is the mean number of requests past their first token
	// when the window's first tokens came: the streams the provider was
	// decoding.
	decoding float64
	// maxDecoding is the most requests past their first token when one
	// of the window's first tokens came.
	maxDecoding int
	// early: the window closed before its length, on its count of
	// samples. It holds the first tokens that came soonest after it
	// opened, and fewer of the slow ones than a whole window: its median
	// is biased low.
	early bool
	// refused: the provider refused a request for lack of capacity while
	// the window was open (a 429, 529 or 503, not a first-token timeout,
	// and not while its refusals read as a request rate).
	refused bool
}

func newDelayWindow(length time.Duration, need int, now time.Time) delayWindow {
	return delayWindow{
		length: length,
		need:   need,
		start:  now,
		vals:   make([]time.Duration, 0, min(max(need, 16), maxWindowSamples)),
		rates:  make([]float64, 0, 64),
	}
}

// add records one normalised TTFT, the in-flight count its request was
// dispatched with and the requests past their first token when it came.
func (w *delayWindow) add(ttft time.Duration, inflight, decoding int) {
	w.count++
	if len(w.vals) < maxWindowSamples {
		w.vals = append(w.vals, ttft)
	}
	w.sumInflight += inflight
	w.maxInflight = max(w.maxInflight, inflight)
	w.sumDecoding += decoding
	w.maxDecoding = max(w.maxDecoding, decoding)
}

// addRate records a per-stream token-rate sample (finite, >= 0).
func (w *delayWindow) addRate(r float64) {
	if len(w.rates) < maxWindowSamples {
		w.rates = append(w.rates, r)
	}
}

// ready reports whether the window may close at now.
func (w *delayWindow) ready(now time.Time) bool {
	if w.count < w.need {
		return false
	}
	open := now.Sub(w.start)
	return open >= w.length || (w.early > 0 && w.count >= w.early && open >= w.settle)
}

// refusal records that the provider refused a request while the window
// was open.
func (w *delayWindow) refusal() { w.refused = true }

// close returns the window's statistics and opens the next one at now.
// With an even count a median is the mean of the two middle values.
func (w *delayWindow) close(now time.Time) windowStats {
	slices.Sort(w.vals)
	n := len(w.vals)
	st := windowStats{n: w.count, maxInflight: w.maxInflight, maxDecoding: w.maxDecoding, refused: w.refused,
		early: now.Sub(w.start) < w.length}
	st.median = (w.vals[(n-1)/2] + w.vals[n/2]) / 2
	for _, v := range w.vals {
		st.absDev += (v - st.median).Abs().Seconds()
	}
	if w.count > 0 {
		st.meanInflight = float64(w.sumInflight) / float64(w.count)
		st.decoding = float64(w.sumDecoding) / float64(w.count)
	}
	if k := len(w.rates); k > 0 {
		st.rates = k
		slices.Sort(w.rates)
		st.rate = (w.rates[(k-1)/2] + w.rates[k/2]) / 2
	}
	w.reset(now)
	return st
}

// reset discards the samples and opens a new window at now.
func (w *delayWindow) reset(now time.Time) {
	w.vals = w.vals[:0]
	w.rates = w.rates[:0]
	w.count = 0
	w.sumInflight = 0
	w.maxInflight = 0
	w.sumDecoding = 0
	w.maxDecoding = 0
	w.refused = false
	w.start = now
}
