package proxy

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// connTable tracks the client connections of the proxy listener, from
// fasthttp's ConnState hook, to hold them to server.max_conns_per_ip and
// server.max_connections. At either cap a new connection first closes the
// longest-idle connection in its scope (its address's, or any): a client
// whose pool holds idle keep-alive connections is not refused its next
// one, and idle connections held to fill the cap are the ones given up.
// Only when no connection in the scope is idle is the new one refused.
//
// A connection is idle from its accept, and after each response, until
// the first byte of its next request; it is active while a request is
// read or served. Requests move a connection between the two with one
// lock-free map lookup and an atomic store each; the lock is taken only
// when a connection opens or closes.
type connTable struct {
	all sync.Map     // net.Conn -> *clientConn
	seq atomic.Int64 // the order in which connections became idle

	mu    sync.Mutex
	byIP  map[netip.Addr][]*clientConn
	list  []*clientConn // every counted connection, for the global cap
	limit int           // server.max_connections; 0: no cap (in-process servers)
}

// clientConn is one tracked connection.
type clientConn struct {
	c  net.Conn
	ip netip.Addr // invalid: not a TCP connection, no per-address cap
	// state is connIdle, connActive or connClosing; idleSince orders when
	// it last became idle (connTable.seq: only the order matters).
	state     atomic.Int32
	idleSince atomic.Int64
	// Where it is counted, guarded by connTable.mu: its places in
	// connTable.list and in its address's slice; counted is false once
	// it has been removed from both.
	counted      bool
	listAt, ipAt int
}

const (
	connIdle int32 = iota
	connActive
	connClosing // closed to make room for a new connection
)

// Why a connection was closed by the caps: the reason label of
// sluice_client_connections_closed_total.
const (
	connReclaimedPerIP = iota // idle, closed for a new connection of its address
	connReclaimedMax          // idle, closed for a new connection at max_connections
	connRefusedPerIP          // new, refused: its address's connections are all active
	connRefusedMax            // new, refused: every connection is active
	numConnReasons
)

var connReasonLabel = [numConnReasons]string{"idle_per_ip", "idle_max_connections", "refused_per_ip", "refused_max_connections"}

// Refusals of a new connection: written before closing it (not on TLS,
// whose handshake has not happened), in plain text as no route is known.
var (
	refusedPerIP = plainAnswer("429 Too Many Requests", "Sluice: too many connections from your address (server.max_conns_per_ip)")
	refusedMax   = plainAnswer("503 Service Unavailable", "Sluice: too many connections (server.max_connections)")
)

func plainAnswer(status, text string) []byte {
	return []byte("HTTP/1.1 " + status + "\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
		strconv.Itoa(len(text)) + "\r\n\r\n" + text)
}

// connState follows each client connection: it holds new connections to
// the caps, marks requests active and idle, and lets the disconnect
// watcher forget a connection that has closed.
func (s *Server) connState(c net.Conn, cs fasthttp.ConnState) {
	switch cs {
	case fasthttp.StateNew:
		s.conns.open(s, c)
	case fasthttp.StateActive:
		if v, ok := s.conns.all.Load(c); ok {
			v.(*clientConn).state.CompareAndSwap(connIdle, connActive)
		}
	case fasthttp.StateIdle:
		if v, ok := s.conns.all.Load(c); ok {
			cc := v.(*clientConn)
			cc.idleSince.Store(s.conns.seq.Add(1))
			cc.state.CompareAndSwap(connActive, connIdle)
		}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		s.watch.forget(c)
		s.conns.close(c)
	}
}

// open counts a new connection, making room for it at a cap or refusing it.
func (t *connTable) open(s *Server, c net.Conn) {
	cc := &clientConn{c: c}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		cc.ip = ta.AddrPort().Addr().Unmap()
	}
	cc.idleSince.Store(t.seq.Add(1))
	perIP := s.snap.Load().serverLimits.maxConnsPerIP

	var reclaim *clientConn
	reason := -1
	t.mu.Lock()
	if t.byIP == nil {
		t.byIP = make(map[netip.Addr][]*clientConn)
	}
	if perIP > 0 && cc.ip.IsValid() && len(t.byIP[cc.ip]) >= perIP {
		if reclaim = longestIdle(t.byIP[cc.ip]); reclaim != nil {
			reason = connReclaimedPerIP
		} else {
			reason = connRefusedPerIP
		}
	} else if t.limit > 0 && len(t.list) >= t.limit {
		if reclaim = longestIdle(t.list); reclaim != nil {
			reason = connReclaimedMax
		} else {
			reason = connRefusedMax
		}
	}
	if reclaim != nil {
		t.uncount(reclaim)
	}
	refused := reason == connRefusedPerIP || reason == connRefusedMax
	if !refused {
		cc.counted = true
		cc.ipAt, cc.listAt = len(t.byIP[cc.ip]), len(t.list)
		t.byIP[cc.ip] = append(t.byIP[cc.ip], cc)
		t.list = append(t.list, cc)
		t.all.Store(c, cc)
	}
	t.mu.Unlock()

	// Counted before the connection is closed or answered: a client (or
	// a test) that has seen its refusal finds it in the metric.
	if reason >= 0 && s.opts.Metrics != nil {
		s.opts.Metrics.connsClosed[reason].Inc()
	}
	if reclaim != nil {
		_ = reclaim.c.Close()
	}
	if refused {
		refuseConn(c, reason)
	}
}

// longestIdle claims the connection of conns idle the longest, or returns
// nil when none is idle. Claimed, it can no longer turn active: a request
// whose first byte arrives meanwhile is lost with the connection, as with
// any keep-alive connection a server closes.
func longestIdle(conns []*clientConn) *clientConn {
	for {
		var best *clientConn
		for _, cc := range conns {
			if cc.state.Load() == connIdle && (best == nil || cc.idleSince.Load() < best.idleSince.Load()) {
				best = cc
			}
		}
		if best == nil || best.state.CompareAndSwap(connIdle, connClosing) {
			return best
		}
	}
}

// uncount removes cc from the counts, moving the last entry of each slice
// into its place. Under t.mu.
func (t *connTable) uncount(cc *clientConn) {
	if !cc.counted {
		return
	}
	cc.counted = false
	last := len(t.list) - 1
	t.list[cc.listAt] = t.list[last]
	t.list[cc.listAt].listAt = cc.listAt
	t.list[last] = nil
	t.list = t.list[:last]

	ipc := t.byIP[cc.ip]
	last = len(ipc) - 1
	if last == 0 {
		delete(t.byIP, cc.ip)
		return
	}
	ipc[cc.ipAt] = ipc[last]
	ipc[cc.ipAt].ipAt = cc.ipAt
	ipc[last] = nil
	t.byIP[cc.ip] = ipc[:last]
}

// close forgets a connection that has closed (or was hijacked).
func (t *connTable) close(c net.Conn) {
	v, ok := t.all.LoadAndDelete(c)
	if !ok {
		return
	}
	t.mu.Lock()
	t.uncount(v.(*clientConn))
	t.mu.Unlock()
}

// refuseConn answers a refused connection and closes it. fasthttp then
// finds it closed and ends it without an answer of its own.
func refuseConn(c net.Conn, reason int) {
	if _, isTLS := c.(interface{ Handshake() error }); !isTLS {
		msg := refusedMax
		if reason == connRefusedPerIP {
			msg = refusedPerIP
		}
		// A new socket's send buffer takes this at once; the deadline only
		// keeps a pathological peer from stalling the accept loop.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write(msg)
	}
	_ = c.Close()
}

// ClientConns returns the client connections open now, as counted for
// server.max_connections.
func (s *Server) ClientConns() int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	return len(s.conns.list)
}
