package proxy

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
)

// rawKeepAlive is an HTTP/1.1 upstream written by hand that keeps its
// connections open: answer writes the answer to request n (from 1, over
// all connections) on the connection it came in on, conn (from 1, in
// accept order), whatever its framing.
type rawKeepAlive struct {
	url   string
	conns atomic.Int64 // connections accepted
	reqs  atomic.Int64 // requests read
}

func rawKeepAliveUpstream(t *testing.T, answer func(c net.Conn, conn, n int, req *http.Request)) *rawKeepAlive {
	t.Helper()
	return rawKeepAliveUpstreamTLS(t, nil, answer)
}

// rawKeepAliveUpstreamTLS is rawKeepAliveUpstream behind TLS with pki's
// certificate (nil: none).
func rawKeepAliveUpstreamTLS(t *testing.T, pki *testPKI, answer func(c net.Conn, conn, n int, req *http.Request)) *rawKeepAlive {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawKeepAlive{url: "http://" + ln.Addr().String()}
	if pki != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pki.cert}, MinVersion: tls.VersionTLS12})
		u.url = "https://" + ln.Addr().String()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conn := int(u.conns.Add(1))
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					answer(c, conn, int(u.reqs.Add(1)), req)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return u
}

// jsonAnswer is a complete JSON answer whose id is id.
func jsonAnswer(id string) string {
	return rawAnswer("200 OK", "application/json", `{"id":"`+id+`","object":"chat.completion","choices":[]}`, "")
}

// sendJSON sends one non-streaming request through s on a new client
// connection and returns the status and body of its answer.
func sendJSON(t *testing.T, s *sluiceUnderTest) (int, string) {
	t.Helper()
	resp, body := rawExchange(t, addrOf(s.base), "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+
		"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	return resp.StatusCode, body
}

// Finding L2: an upstream answer whose framing is inconsistent (more bytes
// than its Content-Length, bytes after its last chunk, a body to a HEAD,
// both Content-Length and Transfer-Encoding) leaves the connection out of
// step: the bytes left on it would be read as the answer to the next
// request, another client's. Such a connection is closed, never pooled:
// the next request goes out on a new connection and gets its own answer.
func TestUpstreamConnWithLeftoverBytesIsClosed(t *testing.T) {
	t.Parallel()
	smuggled := jsonAnswer("smuggled")
	for name, first := range map[string]string{
		"bytes beyond Content-Length": jsonAnswer("first") + smuggled,
		"bytes after the last chunk": "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			chunk(`{"id":"first","object":"chat.completion","choices":[]}`) + "0\r\n\r\n" + smuggled,
		"Content-Length and Transfer-Encoding": "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nTransfer-Encoding: chunked\r\n\r\n" +
			chunk(`{"id":"first","object":"chat.completion","choices":[]}`) + "0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := rawKeepAliveUpstream(t, func(c net.Conn, conn, n int, req *http.Request) {
				if n == 1 {
					write(c, first)
					return
				}
				write(c, jsonAnswer("second"))
			})
			s := startSluice(t, testConfig(up.url, nil))
			if status, body := sendJSON(t, s); status != 200 || !strings.Contains(body, `"first"`) {
				t.Fatalf("first request: %d %s", status, body)
			}
			status, body := sendJSON(t, s)
			if status != 200 || !strings.Contains(body, `"second"`) {
				t.Errorf("second request: %d %s, want its own answer", status, body)
			}
			if n := up.conns.Load(); n != 2 {
				t.Errorf("the upstream saw %d connections: the connection of the first answer was reused", n)
			}
		})
	}
}

// Finding L3: a request written whole on a kept-alive connection that then
// breaks before any answer may have reached the provider (a generation
// billed): it is not sent again behind the retry policy's back. With
// retries off the upstream sees it once and the client gets 502.
func TestWrittenRequestIsNotRedialed(t *testing.T) {
	t.Parallel()
	up := rawKeepAliveUpstream(t, func(c net.Conn, conn, n int, req *http.Request) {
		if n == 2 {
			c.Close() // read whole, then the upstream went away
			return
		}
		write(c, jsonAnswer("ok"))
	})
	s := startSluice(t, testConfig(up.url, func(p *config.Provider) { p.Retries.MaxAttempts = 1 }))
	if status, body := sendJSON(t, s); status != 200 {
		t.Fatalf("first request: %d %s", status, body)
	}
	status, body := sendJSON(t, s)
	if got := up.reqs.Load(); got != 2 {
		t.Errorf("the upstream read %d requests, want 2: the second was sent again after it was written", got)
	}
	if status != 502 {
		t.Errorf("second request: %d %s, want 502", status, body)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// Connections in step are kept: sequential requests, JSON and streamed,
// over plain TCP and over TLS (whose records the look at an idle
// connection must not take for unasked bytes), share one connection.
func TestUpstreamConnInStepIsReused(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[useTLS], func(t *testing.T) {
			t.Parallel()
			raw, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := &countingListener{Listener: raw}
			f := &fakeUpstream{ln: raw, ended: make(chan struct{}, 1000), stop: make(chan struct{})}
			f.srv = &fasthttp.Server{Handler: f.handle, CloseOnShutdown: true, Logger: quietLogger{}}
			var serve net.Listener = ln
			url := "http://" + raw.Addr().String()
			if useTLS {
				serve = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pki.cert}, MinVersion: tls.VersionTLS12})
				url = "https://" + raw.Addr().String()
			}
			go f.srv.Serve(serve) //nolint:errcheck
			t.Cleanup(func() { close(f.stop); _ = f.srv.Shutdown() })
			s := startSluice(t, testConfig(url, func(p *config.Provider) {
				if useTLS {
					p.TLS = config.UpstreamTLS{CAFile: pki.caFile}
				}
			}))
			for i := range 6 {
				hdr := map[string]string{}
				if i%2 == 0 {
					hdr["x-json"] = "1"
				}
				resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", hdr)
				if body := readAll(t, resp); resp.StatusCode != 200 {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
				}
			}
			if n := ln.n.Load(); n != 1 {
				t.Errorf("the upstream accepted %d connections for 6 requests in a row, want 1", n)
			}
		})
	}
}

// Bytes out of step can also arrive after the last look at a connection,
// while it carries the next request, and be read as that request's
// answer. So an upstream that sent an answer out of step keeps none of its
// connections for stepDistrust after it: each request gets a new one.
// Past that, its connections are kept again.
func TestUpstreamOutOfStepKeepsNoConnsForAWhile(t *testing.T) {
	t.Parallel()
	up := rawKeepAliveUpstream(t, func(c net.Conn, conn, n int, req *http.Request) {
		if n == 1 {
			write(c, jsonAnswer("first")+jsonAnswer("smuggled"))
			return
		}
		write(c, jsonAnswer("in step"))
	})
	var skew atomic.Int64
	srv := New(Options{Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	if err := srv.Apply(testConfig(up.url, nil)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := NewFastHTTPServer(srv)
	go fs.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { _ = fs.Shutdown(); srv.Close() })
	s := &sluiceUnderTest{srv: srv, fs: fs, ln: ln, base: "http://" + ln.Addr().String()}

	for i := range 4 {
		if status, body := sendJSON(t, s); status != 200 {
			t.Fatalf("request %d: %d %s", i, status, body)
		}
	}
	if n := up.conns.Load(); n != 4 {
		t.Errorf("4 requests after an answer out of step took %d connections, want one each", n)
	}
	skew.Store(int64(stepDistrust + time.Second))
	for i := range 3 {
		if status, body := sendJSON(t, s); status != 200 {
			t.Fatalf("request %d after the distrust: %d %s", i, status, body)
		}
	}
	if n := up.conns.Load(); n != 5 {
		t.Errorf("3 requests after the distrust ended took %d connections, want 1", n-4)
	}
}
