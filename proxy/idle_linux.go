//go:build linux

package proxy

import "golang.org/x/sys/unix"

// pollRDHUP asks poll whether the peer closed its side: Linux tells it
// apart from bytes waiting.
const pollRDHUP = unix.POLLRDHUP
