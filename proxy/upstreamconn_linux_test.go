//go:build linux

package proxy

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/config"
)

// Finding L2, the bytes arriving late: an idle pooled connection on which
// the upstream sent something nobody asked for (here a whole answer,
// after the one Sluice read) is closed when it is taken from the pool,
// before the next request is written on it.
func TestIdleUpstreamConnWithUnaskedBytesIsNotUsed(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[useTLS], func(t *testing.T) {
			t.Parallel()
			late := make(chan struct{})
			sent := make(chan struct{})
			var tlsPKI *testPKI
			if useTLS {
				tlsPKI = pki
			}
			up := rawKeepAliveUpstreamTLS(t, tlsPKI, func(c net.Conn, conn, n int, req *http.Request) {
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
			s := startSluice(t, testConfig(up.url, func(p *config.Provider) {
				if useTLS {
					p.TLS = config.UpstreamTLS{CAFile: pki.caFile}
				}
			}))
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
		})
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

// BenchmarkUpstreamConnLook is what keeping upstream connections in step
// adds to a request on a pooled connection: the look at the idle
// connection (one poll) and the scan of the answer's header for two
// framings.
func BenchmarkUpstreamConnLook(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			var buf [1]byte
			_, _ = c.Read(buf[:]) // idle until the benchmark ends
		}
	}()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pc := &pooledConn{Conn: c, fd: connFD(c)}
	head := []byte("HTTP/1.1 200 OK\r\nDate: Thu, 03 Dec 2026 15:00:00 GMT\r\nContent-Type: text/event-stream; charset=utf-8\r\n" +
		"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\nx-request-id: req_0123456789abcdef\r\n" +
		"openai-processing-ms: 123\r\nx-ratelimit-limit-requests: 10000\r\nx-ratelimit-remaining-requests: 9999\r\n" +
		"x-ratelimit-reset-requests: 6ms\r\ncf-cache-status: DYNAMIC\r\nServer: cloudflare\r\n\r\ndata: {}\n\n")
	b.Run("poll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ready, _ := pc.look(); ready {
				b.Fatal("an idle connection looked unclean")
			}
		}
	})
	b.Run("header", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if mixedFraming(head) {
				b.Fatal("one framing read as two")
			}
		}
	})
}
