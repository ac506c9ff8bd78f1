package adaptive

import (
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

// classState is one priority class of a limiter: its permits in use, its
// current share of the limit and its counters. It is kept across reloads
// by name, so that permits granted before a reload are returned to the
// class that counted them.
type classState struct {
	name     string
	inflight atomic.Int64
	waiting  atomic.Int64
	share    atomic.Uint64 // float64 bits: fraction of the limit the class may hold now
	holdTime smoothed      // permit hold time, seconds

	admitted atomic.Uint64
	rejected atomic.Uint64
	waitedNs atomic.Int64

	calib calibration // its window under Limiter.mu
}

func (c *classState) shareNow() float64 { return math.Float64frombits(c.share.Load()) }

// queueConf is the queue configuration in force, swapped as a whole on
// reconfigure and read without a lock on the fast path.
type queueConf struct {
	set       settings.Queue
	classes   []*classState // in priority order
	def       int           // index of the default class
	tenantCap int64         // 0: no per-tenant cap
}

// newQueueConf builds the configuration for set, reusing the class states
// of old with the same name.
func newQueueConf(set settings.Queue, old *queueConf) *queueConf {
	qc := &queueConf{set: set, tenantCap: int64(set.TenantMaxInflight)}
	for i, cs := range set.Classes {
		var st *classState
		if old != nil {
			for _, o := range old.classes {
				if o.name == cs.Name {
					st = o
				}
			}
		}
		if st == nil {
			st = &classState{name: cs.Name}
			st.share.Store(math.Float64bits(cs.MaxShare))
		}
		qc.classes = append(qc.classes, st)
		if strings.EqualFold(cs.Name, set.DefaultClass) {
			qc.def = i
		}
	}
	return qc
}

// classOf resolves Flow.Class.
func (qc *queueConf) classOf(id uint8) int {
	if id == 0 || int(id) > len(qc.classes) {
		return qc.def
	}
	return int(id) - 1
}

// sameClasses reports whether qc and o have the same classes in the same
// order (the waiters' levels stay valid).
func (qc *queueConf) sameClasses(o *queueConf) bool {
	if len(qc.classes) != len(o.classes) {
		return false
	}
	for i := range qc.classes {
		if qc.classes[i] != o.classes[i] {
			return false
		}
	}
	return true
}

// classCap is the number of permits class c may hold at the effective
// limit lim: its current share of lim, at least one.
func classCap(c *classState, lim int64) int64 {
	sh := c.shareNow()
	if sh >= 1 {
		return lim
	}
	return max(1, int64(sh*float64(lim)))
}

// takeClass counts a permit for c unless c is at its share.
func takeClass(c *classState, lim int64) bool {
	capN := classCap(c, lim)
	if capN >= lim {
		c.inflight.Add(1)
		return true
	}
	for {
		n := c.inflight.Load()
		if n >= capN {
			return false
		}
		if c.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// shareRefresh is how often the class shares follow the controller.
const shareRefresh = 100 * time.Millisecond

// refreshShares recomputes the saturation and every class's share from
// the controller's state, at most once per shareRefresh unless force. It
// reports whether a share grew (waiters may now be admitted).
func (l *Limiter) refreshShares(now time.Time, force bool) bool {
	last := l.shareAt.Load()
	if !force && now.UnixNano()-last < int64(shareRefresh) && last != 0 {
		return false
	}
	if !l.shareAt.CompareAndSwap(last, now.UnixNano()) {
		return false
	}
	qc := l.qc.Load()
	var cs control.State
	if b := l.ctrl.Load(); b != nil {
		cs = b.c.State()
	}
	sat := saturation(cs, qc.set.SaturationTTFTRatio, qc.set.SaturationHold, now)
	l.sat.Store(math.Float64bits(sat))
	grew := false
	for i, c := range qc.classes {
		set := qc.set.Classes[i]
		sh := set.MaxShare - (set.MaxShare-set.SaturatedShare)*sat
		if old := c.share.Swap(math.Float64bits(sh)); sh > math.Float64frombits(old) {
			grew = true
		}
	}
	return grew
}

// saturation rates how close the provider is to saturation, 0 to 1, from
// what the controller exposes: the TTFT median of its last window against
// its baseline (1 at ratio times the baseline), and the time since its last
// drop (1 at the drop, fading to 0 over hold). The larger counts.
func saturation(cs control.State, ratio float64, hold time.Duration, now time.Time) float64 {
	s := 0.0
	if cs.TTFTBaseline > 0 && cs.TTFTMedian > 0 && ratio > 1 {
		r := float64(cs.TTFTMedian) / float64(cs.TTFTBaseline)
		s = min(max((r-1)/(ratio-1), 0), 1)
	}
	if hold > 0 && !cs.LastDrop.IsZero() {
		if age := now.Sub(cs.LastDrop); age < hold {
			s = max(s, 1-max(float64(age), 0)/float64(hold))
		}
	}
	return s
}

// smoothed is a mean of recent values that a release updates without a
// lock: the plain mean of the first 1/alpha values, then an exponentially
// weighted one with weight alpha. (Started as an EWMA from its first
// value, a first permit held half as long as the rest kept the estimate
// of every wait a third short for some forty requests.) The update is a
// load and a store, not a CAS loop: two releases at the same instant may
// lose one value, which a smoothed mean does not miss, and the release
// path saves a contended atomic; past the first values, n is only read.
type smoothed struct {
	bits atomic.Uint64 // float64 bits; 0 before the first value
	n    atomic.Uint32 // values folded in, counted up to 1/alpha
}

func (s *smoothed) load() float64 { return math.Float64frombits(s.bits.Load()) }

func (s *smoothed) observe(x, alpha float64) {
	a := alpha
	if n := s.n.Load(); float64(n) < 1/alpha {
		s.n.Store(n + 1)
		a = 1 / float64(n+1)
	}
	old := s.load()
	s.bits.Store(math.Float64bits(old + a*(x-old)))
}
