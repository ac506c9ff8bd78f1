package adaptive

// laneHeap is a binary heap of the lanes of one level that have waiters,
// keyed by a waiter's effective start tag (ties by arrival). The serve
// heap is a min-heap on each lane's head and holds the lanes that are not
// blocked: its top is served next. The victim heap is a max-heap on each
// lane's tail and holds every lane with waiters: its top is the waiter
// served last, which a full queue gives up first. Each lane knows its
// index in both, so removal and re-keying are O(log n). The backing slices
// grow to the most lanes ever waiting at once and are reused: no
// allocation in steady state.
type laneHeap struct {
	lanes  []*lane
	victim bool // max-heap on tails; else min-heap on heads
}

// heap indexes of a lane.
const (
	serveHeap = iota
	victimHeap
)

func (h *laneHeap) which() int {
	if h.victim {
		return victimHeap
	}
	return serveHeap
}

// key returns the effective start tag and sequence a lane is ordered by.
func (h *laneHeap) key(ln *lane) (float64, uint64) {
	w := ln.head
	if h.victim {
		w = ln.tail
	}
	return w.tag + ln.offset, w.seq
}

// before reports whether lane i sits above lane j.
func (h *laneHeap) before(i, j int) bool {
	ti, si := h.key(h.lanes[i])
	tj, sj := h.key(h.lanes[j])
	if h.victim {
		ti, tj, si, sj = tj, ti, sj, si
	}
	if ti != tj {
		return ti < tj
	}
	return si < sj
}

func (h *laneHeap) swap(i, j int) {
	w := h.which()
	h.lanes[i], h.lanes[j] = h.lanes[j], h.lanes[i]
	h.lanes[i].idx[w], h.lanes[j].idx[w] = int32(i), int32(j)
}

// top returns the lane at the top, or nil.
func (h *laneHeap) top() *lane {
	if len(h.lanes) == 0 {
		return nil
	}
	return h.lanes[0]
}

func (h *laneHeap) push(ln *lane) {
	i := len(h.lanes)
	ln.idx[h.which()] = int32(i)
	h.lanes = append(h.lanes, ln)
	h.up(i)
}

// has reports whether ln is in h.
func (h *laneHeap) has(ln *lane) bool {
	i := int(ln.idx[h.which()])
	return i >= 0 && i < len(h.lanes) && h.lanes[i] == ln
}

// remove takes ln out of h (a no-op when it is not in it).
func (h *laneHeap) remove(ln *lane) {
	if !h.has(ln) {
		return
	}
	i := int(ln.idx[h.which()])
	last := len(h.lanes) - 1
	if i != last {
		h.swap(i, last)
	}
	h.lanes[last] = nil
	h.lanes = h.lanes[:last]
	ln.idx[h.which()] = -1
	if i != last {
		h.fix(h.lanes[i])
	}
}

// fix restores the order after ln's key changed.
func (h *laneHeap) fix(ln *lane) {
	if !h.has(ln) {
		return
	}
	i := int(ln.idx[h.which()])
	if !h.down(i) {
		h.up(i)
	}
}

func (h *laneHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.before(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts i down and reports whether it moved.
func (h *laneHeap) down(i int) bool {
	start := i
	n := len(h.lanes)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.before(r, l) {
			m = r
		}
		if !h.before(m, i) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
