//go:build linux

package proxy

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Finding L2, the bytes arriving late: an idle pooled connection on which
// the upstream sent something nobody asked for (here a whole answer,
// after the one Sluice read) is closed when it is taken from the pool,
// before the next request is written on it.
func TestIdleUpstreamConnWithUnaskedBytesIsNotUsed(t *testing.T) {
	t.Parallel()
	late := make(chan struct{})
	sent := make(chan struct{})
	up := rawKeepAliveUpstream(t, func(c net.Conn, conn, n int, req *http.Request) {
		if n != 1 {
			write(c, jsonAnswer("second"))
			return
		}
		write(c, jsonAnswer("first"))
		go func() {
			<-late
			write(c, jsonAnswer("smuggled"))
			waitDelivered(c)
			close(sent)
		}()
	})
	s := startSluice(t, testConfig(up.url, nil))
	if status, body := sendJSON(t, s); status != 200 || !strings.Contains(body, `"first"`) {
		t.Fatalf("first request: %d %s", status, body)
	}
	close(late)
	<-sent
	status, body := sendJSON(t, s)
	if status != 200 || !strings.Contains(body, `"second"`) {
		t.Errorf("second request: %d %s, want its own answer", status, body)
	}
	if n := up.conns.Load(); n != 2 {
		t.Errorf("the upstream saw %d connections, want 2", n)
	}
}

// waitDelivered waits until the peer's kernel has everything written on c
// (nothing left unacknowledged in its send queue).
func waitDelivered(c net.Conn) {
	fd := connFD(c)
	for {
		n, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
		if err != nil || n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
