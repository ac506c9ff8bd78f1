package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// scriptedUpstream accepts connections on loopback, reads one request from
// each and hands the connection to script, which writes raw bytes: broken
// framing, resets and stalls that a real HTTP server would not produce.
func scriptedUpstream(t *testing.T, script func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				script(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}

const (
	sseHead   = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	roleEvent = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	tokEvent  = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	doneEvent = "data: [DONE]\n\n"
)

// write writes raw HTTP/1.1 pieces: strings as they are, chunk(s) as one
// chunk of a chunked body.
func write(c net.Conn, parts ...string) {
	for _, p := range parts {
		io.WriteString(c, p)
	}
}

func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	_ = c.(*net.TCPConn).SetLinger(0)
	c.Close()
}

// stall waits until Sluice closes the connection.
func stall(c net.Conn) { io.Copy(io.Discard, c) }

func rawAnswer(status, ctype, body, extra string) string {
	return fmt.Sprintf("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s", status, ctype, len(body), extra, body)
}

const overloaded = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`

// faultRow is one row of the fault matrix (docs/operations.md): a fault,
// what the client sees, what Sluice counts and what the controller hears.
type faultRow struct {
	name     string
	upstream func(t *testing.T) string // the upstream URL
	hdr      map[string]string         // request headers (the fake upstream reads x-*)
	noStream bool                      // a non-streaming request
	client   func(resp *http.Response, cancel context.CancelFunc)

	status    int    // what the client sees; 0: no answer (it left)
	sluiceErr string // X-Sluice-Error
	truncated bool   // the body ends without its terminating chunk
	end       string // sluice_requests_total{end}
	drop      control.DropKind
	frozen    bool // growth frozen by Retry-After
	// roomy: the row moves megabytes, which a loaded -race run can take
	// longer than the matrix's 300 ms timeouts to do; it gets 10 s.
	roomy bool
}

func scripted(script func(c net.Conn)) func(t *testing.T) string {
	return func(t *testing.T) string { return scriptedUpstream(t, script) }
}

func fake(t *testing.T) string { return newFakeUpstream(t).url() }

var upstreamFaults = []faultRow{
	{name: "refused", upstream: func(t *testing.T) string {
		ln, _ := net.Listen("tcp4", "127.0.0.1:0")
		ln.Close()
		return "http://" + ln.Addr().String()
	}, status: 502, sluiceErr: "upstream_unreachable", end: "upstream_unreachable"},
	{name: "reset before headers", upstream: scripted(reset),
		status: 502, sluiceErr: "upstream_unreachable", end: "upstream_unreachable"},
	{name: "reset mid-stream", upstream: scripted(func(c net.Conn) { write(c, sseHead, chunk(roleEvent), chunk(tokEvent)); reset(c) }),
		status: 200, truncated: true, end: "upstream_broke"},
	{name: "stall at TLS handshake", upstream: func(t *testing.T) string { return "https://" + silentListener(t) },
		status: 502, sluiceErr: "upstream_unreachable", end: "upstream_unreachable"},
	{name: "stall before headers, stream", upstream: scripted(stall),
		status: 504, sluiceErr: "first_token_timeout", end: "first_token_timeout", drop: control.DropTimeout},
	{name: "stall before headers, not a stream", upstream: scripted(stall), noStream: true,
		status: 504, sluiceErr: "upstream_timeout", end: "upstream_timeout"},
	{name: "stall at first token", upstream: scripted(func(c net.Conn) { write(c, sseHead, chunk(roleEvent)); stall(c) }),
		status: 200, truncated: true, end: "first_token_timeout", drop: control.DropTimeout},
	{name: "stall between chunks", upstream: scripted(func(c net.Conn) { write(c, sseHead, chunk(roleEvent), chunk(tokEvent)); stall(c) }),
		status: 200, truncated: true, end: "idle_timeout"},
	{name: "stream longer than total", upstream: fake, hdr: map[string]string{"x-events": "100", "x-gap": "50ms"},
		status: 200, truncated: true, end: "total_timeout"},
	{name: "malformed SSE", upstream: scripted(func(c net.Conn) {
		write(c, sseHead, chunk("data: {not json\n\n"), chunk("event: x\nno colon here\n: comment\n\n"), chunk(tokEvent), chunk(doneEvent), "0\r\n\r\n")
	}), status: 200, end: "complete"},
	{name: "huge SSE line", upstream: scripted(func(c net.Conn) {
		write(c, sseHead, chunk(`data: {"choices":[{"index":0,"delta":{"content":"`+strings.Repeat("x", 4<<20)+`"}}]}`+"\n\n"), chunk(doneEvent), "0\r\n\r\n")
	}), status: 200, end: "complete", roomy: true},
	{name: "bad chunking", upstream: scripted(func(c net.Conn) { write(c, sseHead, chunk(roleEvent), "zz\r\nnot a chunk\r\n"); stall(c) }),
		status: 200, truncated: true, end: "upstream_broke"},
	{name: "HTML error page 502", upstream: scripted(func(c net.Conn) {
		write(c, rawAnswer("502 Bad Gateway", "text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>", ""))
	}), status: 502, end: "complete"},
	{name: "HTML error page 503", upstream: scripted(func(c net.Conn) {
		write(c, rawAnswer("503 Service Unavailable", "text/html", "<html><body>down for maintenance</body></html>", ""))
	}), status: 503, end: "complete", drop: control.DropUnavailable},
	{name: "429 with Retry-After", upstream: fake, hdr: map[string]string{"x-status": "429", "x-retry-after": "30"},
		status: 429, end: "complete", drop: control.DropRateLimit, frozen: true},
	{name: "429 without Retry-After", upstream: fake, hdr: map[string]string{"x-status": "429"},
		status: 429, end: "complete", drop: control.DropRateLimit},
	{name: "429 insufficient_quota", upstream: fake, hdr: map[string]string{"x-status": "429", "x-quota": "1"},
		status: 429, end: "complete"},
	{name: "529 with Retry-After", upstream: scripted(func(c net.Conn) {
		write(c, rawAnswer("529 Overloaded", "application/json", overloaded, "Retry-After: 30\r\n"))
	}),
		status: 529, end: "complete", drop: control.DropOverloaded, frozen: true},
	{name: "529 without Retry-After", upstream: scripted(func(c net.Conn) { write(c, rawAnswer("529 Overloaded", "application/json", overloaded, "")) }),
		status: 529, end: "complete", drop: control.DropOverloaded},
	{name: "overloaded error event mid-stream", upstream: scripted(func(c net.Conn) {
		write(c, sseHead, chunk("event: error\ndata: "+overloaded+"\n\n"), "0\r\n\r\n")
	}), status: 200, end: "complete", drop: control.DropOverloaded},
	{name: "client gone mid-stream", upstream: fake, hdr: map[string]string{"x-events": "1000", "x-gap": "20ms"},
		client: func(resp *http.Response, cancel context.CancelFunc) {
			bufio.NewReader(resp.Body).ReadString('\n')
			cancel()
		}, status: 0, end: "client_gone"},
	{name: "client gone waiting for headers", upstream: scripted(stall), hdr: map[string]string{},
		client: nil, status: 0, end: "client_gone"},
}

// The fault matrix of docs/operations.md, end to end: for each fault, the
// status and body the client gets, how Sluice counts the request, and what
// the controller hears; and afterwards no permit is held.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	for _, row := range upstreamFaults {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			m, reg := newTestMetricsReg(t)
			cfg := testConfig(row.upstream(t), func(p *config.Provider) {
				p.Limit.Algorithm, p.Limit.Cooldown = settings.AlgorithmAIMD, 0
				p.Timeouts.Connect, p.Timeouts.FirstToken = 300*time.Millisecond, 300*time.Millisecond
				p.Timeouts.Idle, p.Timeouts.Total = 300*time.Millisecond, 600*time.Millisecond
				if row.roomy {
					p.Timeouts.FirstToken, p.Timeouts.Idle, p.Timeouts.Total = 10*time.Second, 10*time.Second, 10*time.Second
				}
			})
			s := startSluiceWith(t, cfg, Options{Metrics: m})
			lim := s.srv.limiters.Limiter("fake")
			got := runFault(t, s, row)
			testutil.Eventually(t, "permit freed", 5*time.Second, func() bool { return lim.Stats().Inflight == 0 })
			if got.status != row.status || got.sluiceErr != row.sluiceErr || got.truncated != row.truncated {
				t.Errorf("client saw %d %q truncated=%v, want %d %q truncated=%v", got.status, got.sluiceErr, got.truncated, row.status, row.sluiceErr, row.truncated)
			}
			// The permit may be freed (by the disconnect watcher) before
			// the request's end is recorded.
			testutil.Eventually(t, "the request counted under end="+row.end, 5*time.Second, func() bool {
				v, _ := scrape(t, reg).lookup("sluice_requests_total", "provider", "fake", "end", row.end)
				return v == 1
			})
			st := lim.Stats()
			for k := control.DropKind(1); k < control.NumDropKinds; k++ {
				want := uint64(0)
				if k == row.drop {
					want = 1
				}
				if st.Drops[k] != want {
					t.Errorf("controller heard %d %s drops, want %d", st.Drops[k], k, want)
				}
			}
			if frozen := st.Controller.FrozenUntil.After(time.Now()); frozen != row.frozen {
				t.Errorf("growth frozen until %v, want frozen=%v", st.Controller.FrozenUntil, row.frozen)
			}
		})
	}
}

type faultSeen struct {
	status    int
	sluiceErr string
	truncated bool
}

func runFault(t *testing.T, s *sluiceUnderTest, row faultRow) faultSeen {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	if row.noStream {
		body = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/fake/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range row.hdr {
		req.Header.Set(k, v)
	}
	if row.end == "client_gone" && row.client == nil {
		// Leave once the request is at the upstream and waiting.
		go func() {
			lim := s.srv.limiters.Limiter("fake")
			for lim.Stats().Inflight == 0 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			cancel()
		}()
	}
	resp, err := httpClient().Do(req)
	if err != nil {
		return faultSeen{}
	}
	defer resp.Body.Close()
	if row.client != nil {
		row.client(resp, cancel)
		return faultSeen{}
	}
	_, rerr := io.Copy(io.Discard, resp.Body)
	return faultSeen{status: resp.StatusCode, sluiceErr: resp.Header.Get(HeaderError), truncated: rerr != nil}
}

// Every test the fault matrix in docs/operations.md names exists in the
// module (a row may name tests of any package), and every row of
// TestFaultMatrix is in the matrix: the table cannot drift from the tests.
func TestFaultMatrixDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Fault matrix")
	if !ok {
		t.Fatal("docs/operations.md has no Fault matrix section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var src strings.Builder
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, r := range upstreamFaults {
		rows[strings.ReplaceAll(r.name, " ", "_")] = false
	}
	names := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9]+)(/[^`]*)?`")
	for _, line := range strings.Split(section, "\n") {
		for _, m := range names.FindAllStringSubmatch(line, -1) {
			if !strings.Contains(src.String(), "func "+m[1]+"(") {
				t.Errorf("docs name %s, which does not exist", m[1])
			}
			if m[1] == "TestFaultMatrix" && m[2] != "" {
				sub := m[2][1:]
				if _, ok := rows[sub]; !ok {
					t.Errorf("docs name TestFaultMatrix/%s, which is not a row", sub)
				}
				rows[sub] = true
			}
		}
	}
	for sub, documented := range rows {
		if !documented {
			t.Errorf("row TestFaultMatrix/%s is not in the docs' fault matrix", sub)
		}
	}
}
