package proxy

import (
	"time"
)

// Hooks observe the request path (metrics, tracing). They run on request
// goroutines and must be cheap and safe for concurrent use. Nil fields are
// skipped.
type Hooks struct {
	// Rejected runs when admission refused a request or the client left
	// while it waited.
	Rejected func(provider string, err error)
	// Finished runs once per admitted request, when it ends.
	Finished func(e RequestEnd)
}

// RequestEnd summarises one admitted request.
type RequestEnd struct {
	Provider string
	Status   int // upstream status; 0 when no response arrived
	Complete bool
	Waited   time.Duration
	Duration time.Duration // permit held
	TTFT     time.Duration // 0 when no output token was seen
	Tokens   int
}

// SetHooks installs h for all following requests.
func (s *Server) SetHooks(h *Hooks) { s.hooks.Store(h) }

func (s *Server) finished(st *stream, now time.Time, complete bool) {
	h := s.hooks.Load()
	if h == nil || h.Finished == nil {
		return
	}
	e := RequestEnd{Provider: st.prov.name, Status: st.status, Complete: complete, Waited: st.permit.Waited}
	if !st.start.IsZero() {
		e.Duration = now.Sub(st.start)
	}
	if st.firstSeen {
		r := st.meter.Result()
		e.TTFT, e.Tokens = r.TTFT, r.OutputTokens
	}
	h.Finished(e)
}

func (s *Server) rejected(st *stream, err error) {
	if h := s.hooks.Load(); h != nil && h.Rejected != nil {
		h.Rejected(st.prov.name, err)
	}
}
