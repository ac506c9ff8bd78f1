package proxy

import "sync/atomic"

// budget is the memory all buffered bodies may hold at once
// (server.max_buffered_bytes): request bodies, read whole before
// admission, and non-streaming answers, read whole to meter them. A body
// reserves its bytes before it is read; a request body that does not fit
// is refused (503 buffer_budget), an answer that does not fit is relayed
// as it arrives instead of buffered. Streams are never buffered and
// reserve nothing.
//
// Lock-free: one CAS per reservation, one add per release.
type budget struct {
	used  atomic.Int64
	limit atomic.Int64 // set at Apply; a lower limit applies to new reservations
}

// reserve takes n bytes if they fit under the limit.
func (b *budget) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit.Load() {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// release gives back n reserved bytes.
func (b *budget) release(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// BufferedBytes returns the bytes buffered bodies hold now, out of
// server.max_buffered_bytes.
func (s *Server) BufferedBytes() int64 { return s.budget.used.Load() }
