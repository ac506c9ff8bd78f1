package adaptive

import (
	"math"
	"time"
)

// Leaser is a fleet-wide source of permits (strict mode, settings.FleetStrict):
// one lease per request in flight anywhere in the fleet, at most the
// ceiling at once. adaptive/cluster implements it on Redis.
//
// Implementations must be safe for concurrent use.
type Leaser interface {
	// Acquire takes one lease, waiting while the fleet is full until
	// deadline, or until cancel (may be nil) is closed. It returns the
	// lease's id, in 1..MaxLeaseID, or ErrQueueTimeout (no lease became
	// free in time) or ErrCanceled. It tries at least once, even when
	// deadline has passed.
	Acquire(deadline time.Time, cancel <-chan struct{}) (uint64, error)
	// Release gives the lease back. It must not block: Permit.Finish
	// calls it from whichever goroutine ends the request.
	Release(id uint64)
}

// MaxLeaseID is the largest lease id a Leaser may return; the values
// above it mark a permit's lease as pending or finished.
const MaxLeaseID = math.MaxUint64 - 2

// A permit's lease slot: none, pending (Lease is waiting), a lease id, or
// done (the permit was finished; a late lease goes straight back).
const (
	leaseNone    uint64 = 0
	leasePending uint64 = math.MaxUint64 - 1
	leaseDone    uint64 = math.MaxUint64
)

type leaserBox struct{ ls Leaser }

// SetLeaser makes every permit of l take a lease from ls (Permit.Lease)
// before its request goes upstream; nil stops that. Permits holding a
// lease return it to the Leaser they took it from.
func (l *Limiter) SetLeaser(ls Leaser) {
	if ls == nil {
		l.fleet.leaser.Store(nil)
		return
	}
	l.fleet.leaser.Store(&leaserBox{ls})
}

// Leasing reports whether permits of l must take a lease (Permit.Lease).
func (l *Limiter) Leasing() bool { return l.fleet.leaser.Load() != nil }

// Lease is LeaseUntil with the queue's max_wait after the request arrived
// (the time passed to Acquire) as the deadline.
func (p *Permit) Lease(cancel <-chan struct{}) error {
	if p.state.Load() != permitHeld {
		return ErrCanceled
	}
	return p.LeaseUntil(p.granted.Add(-p.waited).Add(p.lim.set.Load().Queue.MaxWait), cancel)
}

// LeaseUntil takes the fleet-wide lease of granted permit p when its
// limiter has a Leaser (strict mode), and returns at once otherwise. The
// wait for a lease shares the request's deadline for a permit
// (Limiter.MaxWaitFor from when it arrived): it ends at deadline, with
// ErrQueueTimeout, or
// with ErrCanceled when cancel is closed or p is finished meanwhile. On
// an error p is still held and must be finished (OutcomeIgnore) by its
// owner as usual. On success the lease is released by Finish, whoever
// calls it; a lease that arrives after Finish goes straight back.
func (p *Permit) LeaseUntil(deadline time.Time, cancel <-chan struct{}) error {
	if p.state.Load() != permitHeld {
		return ErrCanceled
	}
	l := p.lim
	b := l.fleet.leaser.Load()
	if b == nil {
		return nil
	}
	// Written before the CAS that publishes the lease, read by Finish only
	// after it saw a lease id: ordered by the atomics.
	p.leaser = b.ls
	if !p.lease.CompareAndSwap(leaseNone, leasePending) {
		return ErrCanceled // finished already
	}
	if p.state.Load() != permitHeld {
		// Finish ran between the check above and the CAS and saw no
		// lease (endLease): it will not look again.
		p.lease.CompareAndSwap(leasePending, leaseNone)
		return ErrCanceled
	}
	id, err := b.ls.Acquire(deadline, cancel)
	if err != nil {
		p.lease.CompareAndSwap(leasePending, leaseNone)
		return err
	}
	if !p.lease.CompareAndSwap(leasePending, id) {
		b.ls.Release(id) // Finish ran while we waited
		return ErrCanceled
	}
	return nil
}

// Leased reports whether p holds a fleet lease.
func (p *Permit) Leased() bool {
	v := p.lease.Load()
	return v != leaseNone && v != leasePending && v != leaseDone
}

// endLease returns p's lease, if any, and marks the slot done so that a
// lease still being acquired goes straight back. Finish calls it once,
// after it marked p finished, and only when the slot is not empty: a
// permit that never leased pays one atomic load. Lease, which fills the
// slot before it checks p's state again, gives up by itself when it lost
// that race (Finish's state change comes before its load of the slot,
// Lease's CAS of the slot before its state check).
func (p *Permit) endLease() {
	if v := p.lease.Swap(leaseDone); v != leaseNone && v != leasePending && v != leaseDone {
		p.leaser.Release(v)
	}
}
