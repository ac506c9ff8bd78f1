package proxy

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/adaptive"
)

// Limiters returns the limiters of the providers in force, by name, for
// the fleet coordinator (adaptive/cluster) that cmd/sluice wires when the
// config has a cluster block. The map is a copy; the limiters are live.
func (s *Server) Limiters() map[string]*adaptive.Limiter { return s.limiters.Limiters() }

// Rates returns the rate layers of the providers in force, by name, for
// the fleet coordinator, which shares each provider's own rate: limits
// across the fleet. The map is a copy; the rate layers are live.
func (s *Server) Rates() map[string]*adaptive.Rates { return s.limiters.Rates() }

// lease takes the request's fleet lease when its provider is in strict
// mode (limit.fleet: strict): after the local permit, before the request
// goes upstream, waiting within the request's deadline for a permit
// (st.waitDeadline: its client's timeout, or queue.max_wait). Other
// providers pay one atomic load. The lease is returned by Permit.Finish,
// in Server.end like the permit. It moves *now to the end of the lease
// round trip, so TTFT and deadlines count from when the request can go.
func (s *Server) lease(st *stream, now *time.Time) (outcome, bool) {
	if !st.prov.limiter.Leasing() {
		return 0, true
	}
	defer func() { *now = s.now() }()
	cancel, alive := st.waitChan()
	if !alive {
		return outQueuedClientGone, false
	}
	err := st.permit.LeaseUntil(st.waitDeadline, cancel)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, adaptive.ErrQueueTimeout):
		return outQueueTimeout, false
	case st.cut.Load():
		return outRejectedShutdown, false
	}
	return outQueuedClientGone, false
}
