//go:build unix

package proxy

import "golang.org/x/sys/unix"

// idleLook reports whether a read on the idle socket fd would not block
// (ready: bytes or the peer's close are waiting), and whether the peer
// closed or reset it (closed; where the system cannot say, any ready
// socket counts as closed). One poll that does not wait, no allocation.
func idleLook(fd int) (ready, closed bool) {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | pollRDHUP}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return true, true // not a socket that can be asked: do not use it
		}
		ev := fds[0].Revents
		ready = n > 0 && ev != 0
		closed = ev&(pollRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 || (ready && pollRDHUP == 0)
		return ready, closed
	}
}
