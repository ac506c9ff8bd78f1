package proxy

import (
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
)

// watcher keeps every live stream, to cut them at shutdown, and tells a
// stream when its client goes away even while the upstream is silent
// (queued, long prefill), which fasthttp itself only notices at the next
// write. On Linux it asks the kernel (epoll, EPOLLRDHUP) about each client
// socket; elsewhere a disconnect is noticed at the next write.
//
// A client connection joins the epoll set once, at its first request, and
// stays there while it lives (the kernel drops it when the socket closes):
// later requests on it only point its entry at their stream, with no
// system call (two epoll_ctl per request before).
type watcher struct {
	mu      sync.Mutex
	streams map[*stream]struct{}
	fds     map[net.Conn]int // each open client connection's socket descriptor (-1: none)
	conns   []watchedConn    // by client socket descriptor
	poll    *poller          // nil where unsupported or when creation failed
	wakeups atomic.Int64     // hang-up events handled, for tests
	arms    atomic.Int64     // epoll_ctl calls made to (re)arm, for tests
}

// watchedConn is the watcher's entry for a client socket descriptor.
type watchedConn struct {
	// id is fasthttp's ID of the connection the entry is armed for: a
	// descriptor number is reused by later connections, which must join
	// the epoll set anew.
	id    uint64
	st    *stream // the request being served on it; nil between requests
	armed bool    // in the epoll set, its one-shot event not yet delivered
}

func newWatcher() *watcher {
	w := &watcher{streams: make(map[*stream]struct{}), fds: make(map[net.Conn]int)}
	w.poll = newPoller(w.onHangup)
	return w
}

// add registers st and, where possible, watches its client connection c,
// whose fasthttp connection ID is connID.
func (w *watcher) add(st *stream, c net.Conn, connID uint64) {
	w.mu.Lock()
	w.streams[st] = struct{}{}
	st.watched = true
	fd := w.fd(c)
	arm, fresh := false, false
	if fd >= 0 {
		if fd >= len(w.conns) {
			w.conns = append(w.conns, make([]watchedConn, fd+1-len(w.conns))...)
		}
		wc := &w.conns[fd]
		if wc.id != connID || !wc.armed {
			// A new connection, or one whose event was delivered (a stale
			// wake-up between requests): (re)arm. Marked armed first, so a
			// hang-up delivered right after arming is not lost.
			arm, fresh = true, wc.id != connID
			wc.id, wc.armed = connID, true
		}
		wc.st = st
		st.watchFD = fd + 1 // 0 means none
	}
	w.mu.Unlock()
	if !arm {
		return
	}
	w.arms.Add(1)
	var err error
	if fresh {
		err = w.poll.add(fd)
	} else {
		err = w.poll.rearm(fd)
	}
	if err != nil {
		w.mu.Lock()
		if wc := &w.conns[fd]; wc.id == connID {
			*wc = watchedConn{}
		}
		st.watchFD = 0
		w.mu.Unlock()
	}
}

// fd returns the socket descriptor of client connection c, or -1: found
// once per connection (connFD allocates) and kept until the connection
// closes (forget). Called with w.mu held; it may release it meanwhile.
func (w *watcher) fd(c net.Conn) int {
	if w.poll == nil || c == nil {
		return -1
	}
	if !reflect.TypeOf(c).Comparable() {
		return connFD(c) // cannot be a map key: found per request
	}
	if fd, ok := w.fds[c]; ok {
		return fd
	}
	w.mu.Unlock()
	fd := connFD(c)
	w.mu.Lock()
	w.fds[c] = fd
	return fd
}

// forget drops what the watcher keeps about client connection c, which
// has closed (fasthttp's ConnState hook).
func (w *watcher) forget(c net.Conn) {
	if c == nil || !reflect.TypeOf(c).Comparable() {
		return
	}
	w.mu.Lock()
	delete(w.fds, c)
	w.mu.Unlock()
}

// remove forgets st. After it returns, the watcher will not call st again:
// callbacks run under w.mu. The connection stays in the epoll set for its
// next request.
func (w *watcher) remove(st *stream) {
	if !st.watched {
		return
	}
	w.mu.Lock()
	delete(w.streams, st)
	if fd := st.watchFD - 1; fd >= 0 && w.conns[fd].st == st {
		w.conns[fd].st = nil
	}
	st.watched, st.watchFD = false, 0
	w.mu.Unlock()
}

// onHangup runs on the poller's goroutine when fd's peer may have gone.
// The event is one-shot: fd's entry is disarmed until re-armed here (a
// false alarm during a request) or by the connection's next request.
func (w *watcher) onHangup(fd int) {
	w.wakeups.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if fd >= len(w.conns) || !w.conns[fd].armed {
		return // stale: the descriptor was re-armed or dropped since
	}
	wc := &w.conns[fd]
	wc.armed = false
	if wc.st == nil {
		return // between requests: the connection's next request re-arms
	}
	// The event may predate the fd's reuse by a new connection: confirm the
	// peer is really gone before acting.
	if !peerClosed(fd) {
		if w.poll.rearm(fd) == nil {
			wc.armed = true
		}
		return
	}
	wc.st.interrupt(false)
}

// cutAll interrupts every live stream (shutdown's grace period ended) and
// returns how many there were.
func (w *watcher) cutAll() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Requests still waiting for a permit first: a stream cut first frees
	// its permit, a waiter could take it and be sent upstream before its
	// own cut, and a request that never started would count as a stream
	// cut by shutdown instead of a 503 shutting_down.
	for st := range w.streams {
		if !st.permit.Held() {
			st.interrupt(true)
		}
	}
	for st := range w.streams {
		st.interrupt(true) // once: interrupt does nothing the second time
	}
	return len(w.streams)
}

// live returns the number of streams registered.
func (w *watcher) live() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.streams)
}

func (w *watcher) close() {
	if w.poll != nil {
		w.poll.close()
	}
}

// connFD returns the socket descriptor of c, or -1. A TLS connection is
// unwrapped to its socket.
func connFD(c net.Conn) int {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil {
		return -1
	}
	return fd
}
