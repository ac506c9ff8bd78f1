package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// rawExchange sends req (a complete HTTP/1.1 request, CRLFs included) on a
// new connection to addr and reads one response.
func rawExchange(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the response to %q: %v", firstLine(req), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\r\n"); return l }

func addrOf(base string) string { return strings.TrimPrefix(base, "http://") }

// dialSluice opens a raw client connection to s, closed when the test ends,
// that fails rather than hangs after 10 s (only a hang trips it).
func dialSluice(t *testing.T, s *sluiceUnderTest) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addrOf(s.base))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn
}

// sendStreamRequest writes a streaming chat request for the provider "fake"
// on conn, with extra header lines (each ending in CRLF).
func sendStreamRequest(conn net.Conn, extra string) {
	body := `{"model":"m","stream":true}`
	fmt.Fprintf(conn, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", extra, len(body), body)
}

// Defect 2: a HEAD answer has no body. Sluice used to wait for one until
// timeouts.total, holding the permit, then answer 504.
func TestHeadIsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Timeouts.FirstToken, p.Timeouts.Total = 3*time.Second, 3*time.Second
	}))
	req, _ := http.NewRequest("HEAD", s.base+"/fake/v1/models", nil)
	req.Header.Set("x-json", "1")
	resp, err := httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HEAD: status %d %q, want 200", resp.StatusCode, resp.Header.Get(HeaderError))
	}
	// The upstream's Content-Length is the length of the body a GET would
	// get, and is relayed as such.
	if resp.ContentLength < 100 {
		t.Errorf("HEAD: Content-Length %d, want the upstream's", resp.ContentLength)
	}
	if n := s.srv.limiters.Limiter("fake").Stats().Inflight; n != 0 {
		t.Fatalf("%d permits held after the HEAD answer", n)
	}
}

// Only the methods a provider API uses are forwarded: GET, HEAD, POST,
// DELETE. OPTIONS is answered by Sluice (no permit, no upstream); TRACE,
// CONNECT and anything else get 405 in the provider's error shape, and
// never reach the upstream with the injected key (defect 9).
func TestMethodAllowList(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) { p.APIKey = "sk-injected" }))
	addr := addrOf(s.base)
	for _, m := range []string{"TRACE", "CONNECT", "PUT", "PATCH", "PROPFIND"} {
		resp, body := rawExchange(t, addr, m+" /fake/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
		if resp.StatusCode != 405 || resp.Header.Get(HeaderError) != "method_not_allowed" || resp.Header.Get("Allow") != allowedMethods {
			t.Errorf("%s: status %d, %s %q, Allow %q", m, resp.StatusCode, HeaderError, resp.Header.Get(HeaderError), resp.Header.Get("Allow"))
		}
		var e struct{ Type string }
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" {
			t.Errorf("%s: body not in the Anthropic error shape: %s", m, body)
		}
	}
	// CONNECT in authority form names no route.
	if resp, _ := rawExchange(t, addr, "CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n"); resp.StatusCode < 400 {
		t.Errorf("CONNECT authority-form: status %d", resp.StatusCode)
	}
	resp, _ := rawExchange(t, addr, "OPTIONS /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 204 || resp.Header.Get("Allow") != allowedMethods {
		t.Errorf("OPTIONS: status %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if n := up.requests.Load(); n != 0 {
		t.Fatalf("upstream got %d requests; none of these methods may reach it", n)
	}
	for _, m := range []string{"GET", "DELETE"} {
		resp, _ := rawExchange(t, addr, m+" /fake/v1/files/file-1 HTTP/1.1\r\nHost: x\r\nx-json: 1\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Errorf("%s: status %d", m, resp.StatusCode)
		}
	}
	if n := up.requests.Load(); n != 2 {
		t.Fatalf("upstream got %d requests, want the GET and the DELETE", n)
	}
}

// Defect 9: an absolute request-URI only selects among configured routes;
// its userinfo never becomes an upstream Authorization header, and the
// upstream sees an origin-form request line.
func TestAbsoluteURIUserinfoIsNotForwarded(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	resp, body := rawExchange(t, addrOf(s.base), "POST http://alice:secret@169.254.169.254/fake/v1/chat/completions?x=1 HTTP/1.1\r\n"+
		"Host: evil.example\r\nContent-Type: application/json\r\nContent-Length: 2\r\nx-json: 1\r\n\r\n{}")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if a := up.lastReq.Peek("Authorization"); len(a) != 0 {
		t.Errorf("upstream got Authorization %q from the request-URI's userinfo", a)
	}
	if up.lastURI != "/v1/chat/completions?x=1" {
		t.Errorf("upstream request-URI %q", up.lastURI)
	}
}

// Defect 4: the path after the route prefix reaches the upstream byte for
// byte as the client sent it; paths whose meaning depends on who decodes
// them (encoded "/", "\" or NUL, dot segments in any spelling, broken
// escapes) are answered 400 and never reach the upstream.
func TestPathIsForwardedAsReceived(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	addr := addrOf(s.base)
	send := func(path string) (*http.Response, string) {
		return rawExchange(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nx-json: 1\r\n\r\n{}")
	}
	for path, want := range map[string]string{
		"/fake/v1/files/%252e%252e/x":      "/v1/files/%252e%252e/x",
		"/fake/v1/files/a%3Fb%23c":         "/v1/files/a%3Fb%23c",
		"/fake/v1/files/%ff%20x":           "/v1/files/%ff%20x",
		"/fake/v1/files/a..b/.x/x.":        "/v1/files/a..b/.x/x.",
		"/fake/v1/chat/completions?p=%2F/": "/v1/chat/completions?p=%2F/",
		"/f%61ke/v1/chat/completions":      "/v1/chat/completions",
		"/fake":                            "/",
	} {
		resp, body := send(path)
		up.mu.Lock()
		got := up.lastURI
		up.mu.Unlock()
		if resp.StatusCode != 200 || got != want {
			t.Errorf("%s: status %d %s; upstream saw %q, want %q", path, resp.StatusCode, body, got, want)
		}
	}
	before := up.requests.Load()
	for _, path := range []string{
		"/fake/v1/a%2Fb", "/fake/v1/a%2fb", "/fake/v1/%00", "/fake/v1/a%5Cb", "/fake/v1/%1f",
		"/fake/../admin", "/fake/v1/..", "/fake/v1/./x", "/fake/v1/%2e%2E/x", "/fake/v1/.%2e", "/fake/v1/%2e",
		"/fake/v1/%zz", "/fake/v1/%2", "/fake/v1/a\\b",
	} {
		resp, body := send(path)
		if resp.StatusCode != 400 || resp.Header.Get(HeaderError) != "bad_path" || !strings.Contains(body, `"code":"bad_path"`) {
			t.Errorf("%s: status %d %q %s, want 400 bad_path", path, resp.StatusCode, resp.Header.Get(HeaderError), body)
		}
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("%d rejected paths reached the upstream", n)
	}
}

// rawUpstream answers every request with the bytes resp and closes the
// connection, like an HTTP/1.0 server.
func rawUpstream(t *testing.T, resp string) string {
	t.Helper()
	return scriptedUpstream(t, func(c net.Conn) { io.WriteString(c, resp) })
}

// Defect 10: the client gets Sluice's HTTP version, not the upstream's: an
// HTTP/1.0 upstream used to give an HTTP/1.1 client "HTTP/1.0" with
// Transfer-Encoding: chunked.
func TestResponseHasSluicesHTTPVersion(t *testing.T) {
	t.Parallel()
	jsonBody := `{"id":"x","object":"chat.completion","choices":[]}`
	for name, upResp := range map[string]string{
		"json": "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(jsonBody)) + "\r\n\r\n" + jsonBody,
		"sse":  "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			s := startSluice(t, testConfig(rawUpstream(t, upResp), nil))
			resp, body := rawExchange(t, addrOf(s.base), "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
			if resp.Proto != "HTTP/1.1" || resp.StatusCode != 200 {
				t.Fatalf("status line %s %d, want HTTP/1.1 200", resp.Proto, resp.StatusCode)
			}
			if name == "sse" && !strings.Contains(body, "[DONE]") {
				t.Fatalf("body %q", body)
			}
		})
	}
}

// Every path unambiguousPath accepts decodes, segment by segment, to
// segments free of "/", "\", control characters and dot segments, whose
// names (before any parameters) are neither empty nor dots, the leading
// and a trailing empty segment aside: what the upstream routes on is what
// Sluice routed on.
func FuzzUnambiguousPath(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/a%2Fb", "/%2e%2e/x", "/a/../b", "/%252e", "/%ff", "/a%", "/.x/x./..x", "/%5c", "/a b",
		"/v1/..;/admin", "/a//b", "/v1/models/", "/a;b=c/x", "/%2e%3bx/y", "/;x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !unambiguousPath([]byte(p)) {
			return
		}
		segs := strings.Split(p, "/")
		for i, seg := range segs {
			d, err := url.PathUnescape(seg)
			if err != nil {
				t.Fatalf("accepted %q: segment %q does not decode: %v", p, seg, err)
			}
			name, _, _ := strings.Cut(d, ";")
			if name == "." || name == ".." || strings.ContainsAny(d, "/\\\x7f") || strings.IndexByte(d, 0xc0) >= 0 || strings.IndexByte(d, 0xc1) >= 0 || strings.IndexFunc(d, func(r rune) bool { return r < 0x20 }) >= 0 {
				t.Fatalf("accepted %q: segment %q decodes to %q", p, seg, d)
			}
			if name == "" && i > 0 && (i < len(segs)-1 || d != "") {
				t.Fatalf("accepted %q: segment %q has no name", p, seg)
			}
		}
	})
}

// Finding L7: a segment whose name before its parameters (";...") is
// empty, "." or "..", and an empty segment ("//"), are read as another path
// by some backends (path parameters are stripped before dot segments are
// resolved; "//" is merged into "/"): they are answered 400 bad_path in the
// provider's error shape and never reach the upstream. A trailing "/" and
// parameters on an ordinary segment pass.
func TestPathParametersAndEmptySegmentsAreRefused(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	addr := addrOf(s.base)
	send := func(path string) (*http.Response, string) {
		return rawExchange(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nx-json: 1\r\n\r\n{}")
	}
	for _, path := range []string{
		"/fake/v1/..;/admin", "/fake/v1/chat/completions/..;x=y/admin", "/fake/v1/.;/x", "/fake/v1/..%3b/admin",
		"/fake/v1/%2e%2e;x/admin", "/fake/v1/;x/chat", "/fake/v1/..;", "/fake/v1//chat/completions",
		"/fake//v1/chat/completions", "/fake/v1/chat//", "/fake/v1/%c0%ae%c0%ae/admin",
	} {
		resp, body := send(path)
		if resp.StatusCode != 400 || resp.Header.Get(HeaderError) != "bad_path" || !strings.Contains(body, `"code":"bad_path"`) {
			t.Errorf("%s: status %d %q %s, want 400 bad_path", path, resp.StatusCode, resp.Header.Get(HeaderError), body)
		}
	}
	if n := up.requests.Load(); n != 0 {
		t.Fatalf("%d refused paths reached the upstream", n)
	}
	for path, want := range map[string]string{
		"/fake/v1/models/":          "/v1/models/",
		"/fake/v1/files/a;b=c/x":    "/v1/files/a;b=c/x",
		"/fake/v1/files/...;x/y":    "/v1/files/...;x/y",
		"/fake/v1/chat/completions": "/v1/chat/completions",
	} {
		resp, body := send(path)
		up.mu.Lock()
		got := up.lastURI
		up.mu.Unlock()
		if resp.StatusCode != 200 || got != want {
			t.Errorf("%s: status %d %s; upstream saw %q, want %q", path, resp.StatusCode, body, got, want)
		}
	}
}

// Finding L1: the trailer fields of a chunked request body are dropped,
// whether the request announced them (Trailer) or not: they never reach
// the upstream as headers, and a header of the same name keeps its value.
func TestRequestTrailersAreDropped(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	resp, body := rawExchange(t, addrOf(s.base), "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"+
		"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nTrailer: X-Announced, X-Keep\r\n"+
		"X-Keep: header\r\nx-json: 1\r\n\r\n"+
		"2\r\n{}\r\n0\r\nX-Announced: 1\r\nX-Keep: trailer\r\nX-Unannounced: 1\r\nX-Unannounced: 2\r\nX-Api-Key: sk-trailer\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	up.mu.Lock()
	h := up.lastReq
	up.mu.Unlock()
	for _, k := range []string{"X-Announced", "X-Unannounced", "X-Api-Key", "Trailer"} {
		if v := h.Peek(k); v != nil {
			t.Errorf("upstream got %s: %q from the request's trailer", k, v)
		}
	}
	if got := h.PeekAll("X-Keep"); len(got) != 1 || string(got[0]) != "header" {
		t.Errorf("upstream got X-Keep %q, want the header's value alone", got)
	}
}
