package adaptive

import "github.com/sluicehq/sluice/adaptive/control"

// BaselineSharer is implemented by controllers whose delay part learns a
// baseline (gradient2 without a ttft_target). Both methods are safe for
// concurrent use.
type BaselineSharer interface {
	// LearnedBaseline returns the baseline learned so far; false while
	// the controller is cold (no window accepted yet).
	LearnedBaseline() (control.Baseline, bool)
	// SeedBaseline gives a cold controller b as its one accepted window
	// and reports whether it took it (false when not cold, or b is not
	// valid). The seed is one window among the baseMemory the baseline
	// is the median of: the replica's own uncongested windows outvote it
	// from its second and push it out after baseMemory; one that was
	// wrong low reads every window as congested, and the congested-run
	// experiment (less load does not answer) learns the baseline again
	// from the replica's own window. It never makes a congested window
	// acceptable that an own first window would not have been: without a
	// seed the first window is taken as it is.
	SeedBaseline(b control.Baseline) bool
}

// Baseline returns the learned TTFT baseline of the limiter's controller;
// false while it is cold, in set-point mode, for an algorithm without a
// delay part, or for a provider with several upstreams (each learns its
// own).
func (l *Limiter) Baseline() (control.Baseline, bool) {
	if s, ok := l.sharer(); ok {
		return s.LearnedBaseline()
	}
	return control.Baseline{}, false
}

// SeedBaseline seeds a cold controller with b (see BaselineSharer) and
// reports whether it did.
func (l *Limiter) SeedBaseline(b control.Baseline) bool {
	if s, ok := l.sharer(); ok {
		return s.SeedBaseline(b)
	}
	return false
}

func (l *Limiter) sharer() (BaselineSharer, bool) {
	box := l.ctrl.Load()
	if box == nil {
		return nil, false
	}
	s, ok := box.c.(BaselineSharer)
	return s, ok
}
