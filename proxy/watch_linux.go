//go:build linux

package proxy

import (
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// poller waits on an epoll set for hang-ups of client sockets. Only
// EPOLLRDHUP, EPOLLHUP and EPOLLERR are asked for, one-shot: a pipelined
// request (readable data) never wakes it, and a stale event re-arms it
// without waking again (the conditions are level-triggered and peerClosed
// checks the same ones).
type poller struct {
	epfd    int
	wakeR   int
	wakeW   int
	onHup   func(fd int)
	done    chan struct{}
	closing sync.Once
}

const hupEvents = syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | syscall.EPOLLONESHOT

func newPoller(onHup func(fd int)) *poller {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil
	}
	pl := &poller{epfd: epfd, wakeR: p[0], wakeW: p[1], onHup: onHup, done: make(chan struct{})}
	go pl.loop()
	return pl
}

func (p *poller) add(fd int) error {
	ev := syscall.EpollEvent{Events: hupEvents, Fd: int32(fd)}
	err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev)
	if err == syscall.EEXIST {
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
	}
	return err
}

func (p *poller) rearm(fd int) error {
	ev := syscall.EpollEvent{Events: hupEvents, Fd: int32(fd)}
	return syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
}

func (p *poller) loop() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 64)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for i := 0; i < n; i++ {
			fd := int(events[i].Fd)
			if fd == p.wakeR {
				return
			}
			p.onHup(fd)
		}
	}
}

func (p *poller) close() {
	p.closing.Do(func() {
		_, _ = syscall.Write(p.wakeW, []byte{1})
		<-p.done
		syscall.Close(p.epfd)
		syscall.Close(p.wakeR)
		syscall.Close(p.wakeW)
	})
}

// peerClosed reports whether the peer of socket fd has shut down its
// sending side (FIN) or reset the connection, as the socket is now: the
// hang-up event that led here may be stale (the fd reused by a new
// connection since). It asks poll for POLLRDHUP rather than peeking at the
// data: a peek sees bytes the client sent after its request (a pipelined
// request, a stray newline) and not the FIN behind them, which left the
// watcher re-arming and waking in a loop while the disconnect went
// unnoticed.
func peerClosed(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return true // not a socket we can ask about any more
		}
		return n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	}
}
