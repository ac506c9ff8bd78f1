//go:build linux

package proxy

import (
	"sync"
	"syscall"
)

// poller waits on an epoll set for hang-ups of client sockets. Only
// EPOLLRDHUP, EPOLLHUP and EPOLLERR are asked for, one-shot: a pipelined
// request (readable data) never wakes it.
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

func (p *poller) rearm(fd int) {
	ev := syscall.EpollEvent{Events: hupEvents, Fd: int32(fd)}
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_MOD, fd, &ev)
}

func (p *poller) remove(fd int) {
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
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

// peerClosed reports whether the peer of socket fd has closed or reset the
// connection: a non-blocking peek sees EOF or an error. Readable data (a
// pipelined request) or nothing at all means it is still there.
func peerClosed(fd int) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return false
	}
	return err != nil || n == 0
}
