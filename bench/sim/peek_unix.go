//go:build unix

package sim

import (
	"errors"
	"net"
	"syscall"
)

// peekable returns c if its socket can be peeked for a disconnect, else nil.
func peekable(c net.Conn) net.Conn {
	if _, ok := c.(syscall.Conn); ok {
		return c
	}
	return nil
}

// connGone reports whether the peer of c has closed or reset the
// connection, by peeking one byte without blocking (MSG_PEEK|MSG_DONTWAIT):
// 0 bytes means EOF, EAGAIN means alive and silent, data (a pipelined
// request) means alive. It does not consume anything.
func connGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
		case rerr == nil:
			gone = n == 0
		case errors.Is(rerr, syscall.EAGAIN), errors.Is(rerr, syscall.EWOULDBLOCK), errors.Is(rerr, syscall.EINTR):
		default:
			gone = true
		}
		return true // never wait for readability
	})
	return gone || err != nil
}
