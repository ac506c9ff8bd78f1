package proxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
)

// h2cOnlyUpstream accepts connections and behaves like a server that speaks
// HTTP/2 with prior knowledge only: it reads what it takes for a client
// preface, and, with settings, sends its SETTINGS frame first (as gRPC
// servers do), then closes on the HTTP/1.1 bytes it got instead.
func h2cOnlyUpstream(t *testing.T, settings bool) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if settings {
					_, _ = c.Write([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}) // empty SETTINGS frame
				}
				_, _ = io.ReadFull(bufio.NewReader(c), make([]byte, 24)) // the preface's length
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// Sluice speaks HTTP/1.1 to upstreams. One that speaks only HTTP/2 over
// cleartext (h2c, prior knowledge) gets a clean 502 upstream_unreachable
// in the provider's error shape, the permit back, and no drop fed to the
// controller (docs/operations.md says so).
func TestH2COnlyUpstreamIs502(t *testing.T) {
	t.Parallel()
	for _, settings := range []bool{false, true} {
		u := startSluice(t, testConfig(h2cOnlyUpstream(t, settings), nil))
		resp, err := httpClient().Post(u.base+"/fake/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 502 || resp.Header.Get(HeaderError) != "upstream_unreachable" || !strings.Contains(string(body), `"error"`) {
			t.Errorf("settings %v: %d %s=%q %s, want 502 upstream_unreachable with an error body", settings, resp.StatusCode, HeaderError, resp.Header.Get(HeaderError), body)
		}
		ls := u.srv.Providers()[0].Limiter
		if ls.Inflight != 0 {
			t.Errorf("settings %v: %d permits still held", settings, ls.Inflight)
		}
		for k, n := range ls.Drops {
			if n != 0 {
				t.Errorf("settings %v: %d drops of kind %d fed to the controller", settings, n, k)
			}
		}
	}
}
