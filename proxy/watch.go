package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// watcher keeps every live stream, to cut them at shutdown, and tells a
// stream when its client goes away even while the upstream is silent
// (queued, long prefill), which fasthttp itself only notices at the next
// write. On Linux it asks the kernel (epoll, EPOLLRDHUP) about each client
// socket; elsewhere a disconnect is noticed at the next write.
type watcher struct {
	mu      sync.Mutex
	streams map[*stream]struct{}
	byFD    map[int]*stream
	poll    *poller      // nil where unsupported or when creation failed
	wakeups atomic.Int64 // hang-up events handled, for tests
}

func newWatcher() *watcher {
	w := &watcher{streams: make(map[*stream]struct{}), byFD: make(map[int]*stream)}
	w.poll = newPoller(w.onHangup)
	return w
}

// add registers st and, where possible, watches its client connection.
func (w *watcher) add(st *stream, c net.Conn) {
	fd := -1
	if w.poll != nil {
		fd = connFD(c)
	}
	w.mu.Lock()
	w.streams[st] = struct{}{}
	if fd >= 0 {
		w.byFD[fd] = st
	}
	st.watched = true
	w.mu.Unlock()
	if fd >= 0 && w.poll.add(fd) == nil {
		st.watchFD = fd + 1 // 0 means none
	} else if fd >= 0 {
		w.mu.Lock()
		delete(w.byFD, fd)
		w.mu.Unlock()
	}
}

// remove forgets st. After it returns, the watcher will not call st again:
// callbacks run under w.mu.
func (w *watcher) remove(st *stream) {
	if !st.watched {
		return
	}
	w.mu.Lock()
	delete(w.streams, st)
	fd := st.watchFD - 1
	if fd >= 0 && w.byFD[fd] == st {
		delete(w.byFD, fd)
	}
	st.watched = false
	w.mu.Unlock()
	if fd >= 0 {
		w.poll.remove(fd)
		st.watchFD = 0
	}
}

// onHangup runs on the poller's goroutine when fd's peer may have gone.
func (w *watcher) onHangup(fd int) {
	w.wakeups.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.byFD[fd]
	if st == nil {
		return // stale event: the stream ended already
	}
	// The event may predate the fd's reuse by a new connection: confirm the
	// peer is really gone before acting.
	if !peerClosed(fd) {
		w.poll.rearm(fd)
		return
	}
	st.interrupt(false)
}

// cutAll interrupts every live stream (shutdown's grace period ended) and
// returns how many there were.
func (w *watcher) cutAll() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for st := range w.streams {
		st.interrupt(true)
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
