package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// fasthttp's process-wide Date refresher outlives every server.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}

// harness is a Server served on an in-memory or loopback TCP listener,
// with a net/http client bound to it.
type harness struct {
	t      *testing.T
	s      *Server
	base   string
	client *http.Client
	tr     *http.Transport
	served chan error
}

// fast is a configuration for quick, deterministic tests: no jitter, no
// load effect, model time 100x faster than real.
func fast() Config {
	return Config{
		JitterSigma: -1,
		ITLLoad:     -1,
		TimeScale:   0.01,
		Seed:        1,
	}
}

// start serves New(cfg); tcp selects a 127.0.0.1 listener (needed when a
// test relies on disconnect detection of silent requests) instead of an
// in-memory one. Cleanup closes everything and checks the stats invariant.
func start(t *testing.T, cfg Config, tcp bool) *harness {
	t.Helper()
	h := &harness{t: t, s: New(cfg), served: make(chan error, 1)}
	var ln net.Listener
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}
	if tcp {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln = l
		h.base = "http://" + l.Addr().String()
	} else {
		l := fasthttputil.NewInmemoryListener()
		ln = l
		h.base = "http://sim"
		tr.DialContext = func(context.Context, string, string) (net.Conn, error) { return l.Dial() }
	}
	h.tr = tr
	h.client = &http.Client{Transport: tr}
	go func() { h.served <- h.s.Serve(ln) }()
	t.Cleanup(h.close)
	return h
}

func (h *harness) close() {
	h.tr.CloseIdleConnections()
	if err := h.s.Close(); err != nil {
		h.t.Errorf("Close: %v", err)
	}
	select {
	case err := <-h.served:
		if err != nil {
			h.t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		h.t.Error("Serve did not return after Close")
	}
	h.tr.CloseIdleConnections()
	checkInvariant(h.t, h.s.Stats())
}

func checkInvariant(t *testing.T, st Stats) {
	t.Helper()
	sum := uint64(st.Open) + st.Completed + st.Rejected429 + st.Rejected529 + st.Disconnects + st.Errors + st.Aborted
	if st.Requests != sum {
		t.Errorf("stats invariant broken: requests %d != open+terminal %d: %+v", st.Requests, sum, st)
	}
	if st.MaxRunning > st.MaxInFlight || (st.MaxInFlight > st.MaxOpen && st.MaxOpen > 0) {
		t.Errorf("high-water marks out of order: %+v", st)
	}
}

// post sends a JSON body to path with extra headers ("k", "v", ...).
func (h *harness) post(ctx context.Context, path, body string, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return h.client.Do(req)
}

// mustPost is post that fails the test on a transport error.
func (h *harness) mustPost(path, body string, hdr ...string) *http.Response {
	h.t.Helper()
	resp, err := h.post(context.Background(), path, body, hdr...)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

// waitStats polls Stats until cond holds or 5 s pass.
func (h *harness) waitStats(what string, cond func(Stats) bool) Stats {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := h.s.Stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s: %+v", what, st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sseEvent is one parsed server-sent event and when its blank line arrived.
type sseEvent struct {
	name string
	data string
	at   time.Time
}

// readSSE splits r into events (LF line endings, as the simulator writes
// them) until EOF or an error, which it returns (nil on clean EOF).
func readSSE(r io.Reader) ([]sseEvent, error) {
	br := bufio.NewReader(r)
	var evs []sseEvent
	var cur sseEvent
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" {
				err = nil
			}
			return evs, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			cur.data = strings.Join(data, "\n")
			cur.at = time.Now()
			evs = append(evs, cur)
			cur, data = sseEvent{}, nil
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

// decode unmarshals an event's data into a generic map, failing the test if
// it is not a JSON object.
func decode(t *testing.T, ev sseEvent) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
		t.Fatalf("event %q data is not JSON: %v: %s", ev.name, err, ev.data)
	}
	return m
}

// path walks a decoded JSON value by keys and indexes ("choices", 0, ...).
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}
