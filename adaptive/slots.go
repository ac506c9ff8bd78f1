package adaptive

import (
	"sync/atomic"
	"time"
)

// slotRing counts two kinds of events (a and b) over a sliding window
// made of numSlots slots, lock-free: recording is an atomic add on the
// current slot, and a slot is recycled by the first event of its next
// turn (a CAS on its turn number, then clearing its counts).
//
// Known inexactness, bounded and accepted: an event recorded while another
// goroutine recycles the same slot (between its CAS and its clearing) may
// be lost, and a read concurrent with a recycle may count a slot twice
// or not at all. Budgets and failure ratios are estimates over seconds;
// an off-by-a-few count at a slot boundary does not change a decision in
// a way that matters.
type slotRing struct {
	width atomic.Int64 // ns per slot
	slots [numSlots]slot
}

const numSlots = 10

type slot struct {
	turn atomic.Int64 // index of the slot's current period: unix ns / width
	a, b atomic.Int64
}

// setWindow sets the window (numSlots slots) and, when it changed,
// clears the counts (they were counted in slots of another width).
func (r *slotRing) setWindow(w time.Duration) {
	width := max(int64(w)/numSlots, 1)
	if r.width.Swap(width) != width {
		r.reset()
	}
}

// current returns the slot for now, recycled if it held an older period.
func (r *slotRing) current(now time.Time) *slot {
	t := now.UnixNano() / r.width.Load()
	s := &r.slots[(t%numSlots+numSlots)%numSlots] // t < 0 before 1970
	if old := s.turn.Load(); old != t && s.turn.CompareAndSwap(old, t) {
		s.a.Store(0)
		s.b.Store(0)
	}
	return s
}

// add records da events of kind a and db of kind b at now.
func (r *slotRing) add(now time.Time, da, db int64) {
	s := r.current(now)
	if da != 0 {
		s.a.Add(da)
	}
	if db != 0 {
		s.b.Add(db)
	}
}

// sum returns the counts of the window ending at now.
func (r *slotRing) sum(now time.Time) (a, b int64) {
	t := now.UnixNano() / r.width.Load()
	for i := range r.slots {
		s := &r.slots[i]
		if turn := s.turn.Load(); turn > t-numSlots && turn <= t {
			a += s.a.Load()
			b += s.b.Load()
		}
	}
	return a, b
}

// reset clears every slot (e.g. when a breaker closes).
func (r *slotRing) reset() {
	for i := range r.slots {
		r.slots[i].turn.Store(-1)
		r.slots[i].a.Store(0)
		r.slots[i].b.Store(0)
	}
}
