//go:build unix

package proxy

import "golang.org/x/sys/unix"

// readable reports whether a read on socket fd would not block: bytes or
// the peer's close (EOF, reset) are waiting. One poll, no wait, no
// allocation.
func readable(fd int) bool {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return true // not a socket that can be asked: do not trust it
		}
		return n > 0 && fds[0].Revents != 0
	}
}
