package adaptive

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

// Upstream is one upstream of a provider (a key, a region, a deployment,
// a replica): its own adaptive limit, in-flight count, mirrors of the
// provider's quotas (one per account and model), and circuit breaker.
type Upstream struct {
	name  string
	index atomic.Int32

	set      atomic.Pointer[settings.Upstream]
	ctrl     atomic.Pointer[ctrlBox]
	ctrlSet  settings.Limit // the limit settings ctrl was built from (under UpstreamSet.mu)
	inflight atomic.Int64
	decoding atomic.Int64 // attempts past their first token (Sample.Decoding)
	pacing   atomic.Int64 // attempts waiting for their dispatch slot (Attempt.Pace)
	accts    atomic.Pointer[accountTable]
	brk      Breaker

	attempts  atomic.Uint64
	failures  atomic.Uint64 // counted by the breaker as failures
	failovers atomic.Uint64 // attempts that came here from another upstream
}

// Name returns the upstream's configured name.
func (u *Upstream) Name() string { return u.name }

// Index returns the upstream's position in the provider's list.
func (u *Upstream) Index() int { return int(u.index.Load()) }

// Breaker returns the upstream's circuit breaker.
func (u *Upstream) Breaker() *Breaker { return &u.brk }

// Quota returns the upstream's mirror of the provider's quota for the
// zero QuotaKey (see QuotaOf).
func (u *Upstream) Quota() *Quota { return u.QuotaOf(time.Now(), QuotaKey{}) }

// QuotaOf returns the upstream's mirror of the provider's quota for k at
// now, nil when k has no place in the upstream's table of accounts. The
// quota stays valid while the account is in use; for tests and status.
func (u *Upstream) QuotaOf(now time.Time, k QuotaKey) *Quota {
	t := u.accts.Load()
	mq := t.acquire(now, k)
	if mq == nil {
		return nil
	}
	t.release(mq)
	return &mq.q
}

// limit is the upstream's effective limit: its controller's, capped by
// its own ceiling.
func (u *Upstream) limit() int64 {
	l := int64(1)
	if b := u.ctrl.Load(); b != nil {
		l = int64(b.c.Limit())
	}
	if c := u.set.Load().Ceiling; c > 0 {
		l = min(l, int64(c))
	}
	return max(l, 1)
}

// usableLimit is what the upstream adds to its provider's limit at now:
// its limit while the breaker is closed, at most its probe count while
// half-open, nothing while open.
func (u *Upstream) usableLimit(now time.Time, probes int) int64 {
	switch u.brk.State(now) {
	case BreakerOpen:
		return 0
	case BreakerHalfOpen:
		return min(u.limit(), int64(probes))
	}
	return u.limit()
}

func (u *Upstream) count(v breakerVerdict) {
	u.attempts.Add(1)
	if v == verdictFailure {
		u.failures.Add(1)
	}
}

// UpstreamStats is one upstream's state for metrics and the status page.
type UpstreamStats struct {
	Name     string
	Weight   int
	Inflight int
	// Limit is the upstream's effective limit (its controller's, capped by
	// its ceiling); Controller is its controller's state.
	Limit      int
	Controller control.State
	Breaker    BreakerStats
	// Quota is, by dimension, the mirror of the provider's quota (one per
	// account and model) that has spent the largest share of its
	// capacity: level, capacity and window; zero where nothing is limited
	// or learned.
	Quota [NumDims]QuotaDimStats
	// Accounts counts the accounts and quotas the upstream learns.
	Accounts AccountStats
	// Attempts counts finished attempts; Failures those the breaker counted
	// as failures; Failovers the attempts that came from another upstream.
	Attempts, Failures, Failovers uint64
}

// QuotaDimStats is one dimension of a quota at a point in time.
type QuotaDimStats struct {
	Level, Capacity int64
	Window          time.Duration
}

// Stats returns the upstream's state at now.
func (u *Upstream) Stats(now time.Time) UpstreamStats {
	s := UpstreamStats{
		Name:      u.name,
		Weight:    u.set.Load().Weight,
		Inflight:  int(u.inflight.Load()),
		Limit:     int(u.limit()),
		Breaker:   u.brk.Stats(now),
		Attempts:  u.attempts.Load(),
		Failures:  u.failures.Load(),
		Failovers: u.failovers.Load(),
	}
	if b := u.ctrl.Load(); b != nil {
		s.Controller = b.c.State()
	}
	s.Accounts = u.accts.Load().stats(now, &s.Quota)
	return s
}

// UpstreamSet is a provider's upstreams and the choice among them. It is
// also the Controller of the provider's Limiter: the provider's limit is
// the sum of what its upstreams can take (each one's adaptive limit while
// its breaker is closed, its probes while half-open, nothing while open),
// which the limiter clamps to the provider's ceiling. So there is one
// queue and one ceiling per provider, and one adaptive limit per upstream
// where the feedback is: a slow replica lowers its own limit, not its
// neighbour's.
//
// A provider with a single upstream is a set of one, whose limit is that
// upstream's controller's: the same behaviour as a provider without
// upstreams.
type UpstreamSet struct {
	clk   control.Clock
	epoch time.Time
	ups   atomic.Pointer[[]*Upstream]
	// maxAccounts bounds each upstream's table of accounts
	// (rate.max_accounts; under mu).
	maxAccounts int
	brkSet      atomic.Pointer[settings.Breaker]
	follow      atomic.Bool // follow the provider's rate-limit headers
	// shared: the set has one upstream, whose controller is also the
	// provider limiter's (built by a Registry). The provider's Permit
	// feeds it; Attempts do not feed it a second time.
	shared atomic.Bool

	mu sync.Mutex // Reconfigure
}

// NewUpstreamSet builds the upstreams of one provider: limit is the
// provider's limit block (each upstream's controller is built from it,
// with the upstream's own ceiling when lower), brk the breaker block,
// ups the upstreams (at least one, names unique), followHeaders whether
// the provider's rate-limit headers are followed. clk nil: SystemClock.
func NewUpstreamSet(clk control.Clock, limit settings.Limit, brk settings.Breaker, ups []settings.Upstream, followHeaders bool) (*UpstreamSet, error) {
	if clk == nil {
		clk = SystemClock{}
	}
	s := &UpstreamSet{clk: clk, epoch: clk.Now()}
	if err := s.Reconfigure(limit, brk, ups, followHeaders); err != nil {
		return nil, err
	}
	return s, nil
}

// Reconfigure applies new settings. It is all or nothing: on an invalid
// setting it changes nothing. An upstream whose name is kept keeps its
// state: in-flight attempts, breaker, learned quota, and its limit (when
// the limit settings changed and the algorithm did not, its new
// controller starts from the limit the old one had reached). Upstreams
// that are gone are forgotten; their attempts in flight finish normally.
func (s *UpstreamSet) Reconfigure(limit settings.Limit, brk settings.Breaker, ups []settings.Upstream, followHeaders bool) error {
	if err := checkUpstreams(limit, brk, ups); err != nil {
		return err
	}
	s.reconfigure(limit, brk, ups, followHeaders, false, settings.DefaultRate().MaxAccounts)
	return nil
}

// reconfigure is Reconfigure with valid settings. share (a Registry's
// sets) makes a set of one upstream share that upstream's controller with
// the provider's limiter (see providerController). maxAccounts bounds
// each upstream's table of accounts: a change of it, or of whether the
// upstream is passthrough, starts the table afresh.
func (s *UpstreamSet) reconfigure(limit settings.Limit, brk settings.Breaker, ups []settings.Upstream, followHeaders, share bool, maxAccounts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	fresh := maxAccounts != s.maxAccounts
	s.maxAccounts = maxAccounts
	old := map[string]*Upstream{}
	if cur := s.ups.Load(); cur != nil {
		for _, u := range *cur {
			old[u.name] = u
		}
	}
	next := make([]*Upstream, len(ups))
	for i, us := range ups {
		u := old[us.Name]
		l := perMinute(us.Rate, 0)
		if u == nil {
			u = &Upstream{name: us.Name}
		}
		if t := u.accts.Load(); t == nil || fresh || t.passthrough != us.Passthrough {
			u.accts.Store(newAccountTable(s.epoch, l, maxAccounts, us.Passthrough))
		} else {
			t.configure(now, l)
		}
		u.brk.reconfigure(brk)
		u.index.Store(int32(i))
		u.set.Store(&us)
		cs := upstreamLimit(limit, us.Ceiling)
		if u.ctrl.Load() == nil || u.ctrlSet != cs {
			start := cs
			if b := u.ctrl.Load(); b != nil && u.ctrlSet.Algorithm == cs.Algorithm {
				start.Initial = min(max(b.c.Limit(), cs.Min), cs.Ceiling)
			}
			ctrl, err := control.New(start, s.clk)
			if err != nil { // unreachable: checked by the caller
				panic(err)
			}
			u.ctrl.Store(newCtrlBox(ctrl))
			u.ctrlSet = cs
		}
		next[i] = u
	}
	s.brkSet.Store(&brk)
	s.follow.Store(followHeaders)
	s.shared.Store(share && len(next) == 1)
	s.ups.Store(&next)
}

// providerController is the Controller of the provider's limiter: the
// only upstream's own controller when the set shares it (one upstream),
// else the set itself, whose limit is the sum of its upstreams'.
func (s *UpstreamSet) providerController() control.Controller {
	if s.shared.Load() {
		return (*s.ups.Load())[0].ctrl.Load().c
	}
	return s
}

// quotasOn reports whether any upstream's quota limits something
// (configured, or learned from the provider's headers).
func (s *UpstreamSet) quotasOn() bool {
	for _, u := range s.Upstreams() {
		if u.accts.Load().on() {
			return true
		}
	}
	return false
}

// upstreamLimit is the provider's limit settings for one upstream: its
// ceiling lowered to the upstream's own, min and initial within it.
func upstreamLimit(l settings.Limit, ceiling int) settings.Limit {
	if ceiling > 0 && ceiling < l.Ceiling {
		l.Ceiling = ceiling
		l.Min = min(l.Min, ceiling)
		l.Initial = min(l.Initial, ceiling)
	}
	return l
}

func checkUpstreams(limit settings.Limit, brk settings.Breaker, ups []settings.Upstream) error {
	var errs []error
	if ps := limit.Problems(); len(ps) > 0 {
		errs = append(errs, fmt.Errorf("limit: %v", ps))
	}
	if ps := brk.Problems(); len(ps) > 0 {
		errs = append(errs, fmt.Errorf("breaker: %v", ps))
	}
	if len(ups) < 1 || len(ups) > settings.MaxUpstreams {
		errs = append(errs, fmt.Errorf("upstreams: need 1 to %d, got %d", settings.MaxUpstreams, len(ups)))
	}
	seen := map[string]bool{}
	for i, u := range ups {
		if ps := u.Problems(); len(ps) > 0 {
			errs = append(errs, fmt.Errorf("upstreams[%d]: %v", i, ps))
		}
		if seen[u.Name] {
			errs = append(errs, fmt.Errorf("upstreams[%d]: duplicate name %q", i, u.Name))
		}
		seen[u.Name] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("adaptive: invalid upstreams: %w", errors.Join(errs...))
	}
	return nil
}

// Upstreams returns the provider's upstreams, in configured order. The
// slice is shared: do not modify it.
func (s *UpstreamSet) Upstreams() []*Upstream { return *s.ups.Load() }

// Stats returns every upstream's state at now.
func (s *UpstreamSet) Stats(now time.Time) []UpstreamStats {
	ups := s.Upstreams()
	out := make([]UpstreamStats, len(ups))
	for i, u := range ups {
		out[i] = u.Stats(now)
	}
	return out
}

// Limit is the provider's limit: the sum of its upstreams' usable limits
// at now (Controller).
func (s *UpstreamSet) Limit() int {
	now := s.clk.Now()
	probes := s.brkSet.Load().HalfOpenProbes
	var sum int64
	for _, u := range s.Upstreams() {
		sum += u.usableLimit(now, probes)
	}
	return int(min(sum, settings.MaxCeiling))
}

// Observe returns Limit (Controller). Samples reach each upstream's
// controller through the request's Attempt, which knows the upstream; the
// provider's permit only needs the new sum.
func (s *UpstreamSet) Observe(control.Sample) int { return s.Limit() }

// State describes the provider's limit (Controller): with one upstream,
// its controller's state; with several, the sum, bound by "upstreams".
func (s *UpstreamSet) State() control.State {
	ups := s.Upstreams()
	if len(ups) == 1 {
		if b := ups[0].ctrl.Load(); b != nil {
			st := b.c.State()
			st.Limit = s.Limit()
			if ups[0].brk.State(s.clk.Now()) != BreakerClosed {
				st.Binding = BindingBreaker
			}
			return st
		}
	}
	st := control.State{Limit: s.Limit(), Binding: BindingUpstreams}
	for i, u := range ups {
		b := u.ctrl.Load()
		if b == nil {
			continue
		}
		us := b.c.State()
		if i == 0 {
			st.Algorithm = us.Algorithm
		}
		// The provider's last drop and freeze are its upstreams' latest,
		// so that a fleet coordinator and the status page see them.
		if us.LastDrop.After(st.LastDrop) {
			st.LastDrop, st.LastDropKind = us.LastDrop, us.LastDropKind
		}
		if us.FrozenUntil.After(st.FrozenUntil) {
			st.FrozenUntil = us.FrozenUntil
		}
		// The provider's pace is the sum of its upstreams' (0: none
		// paces).
		st.Pace += us.Pace
	}
	return st
}

// FreezeGrowth implements GrowthFreezer for a provider with several
// upstreams: each upstream's controller is frozen until until.
func (s *UpstreamSet) FreezeGrowth(until time.Time) {
	for _, u := range s.Upstreams() {
		if b := u.ctrl.Load(); b != nil {
			if f, ok := b.c.(GrowthFreezer); ok {
				f.FreezeGrowth(until)
			}
		}
	}
}

// Bindings of a provider whose limit comes from an UpstreamSet:
// "upstreams" when it is the sum of several upstreams' limits, "breaker"
// when its only upstream's breaker is not closed.
const (
	BindingUpstreams = "upstreams"
	BindingBreaker   = "breaker"
)

var _ control.Controller = (*UpstreamSet)(nil)
