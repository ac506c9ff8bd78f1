package sim

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// TestShutdownGraceful: Shutdown lets a running stream finish.
func TestShutdownGraceful(t *testing.T) {
	cfg := fast()
	cfg.TimeScale = 1
	h := start(t, cfg, false)
	resp := h.mustPost("/v1/chat/completions", `{"stream":true}`, HeaderOutputTokens, "5", HeaderTTFT, "100ms", HeaderITL, "10ms")
	h.waitStats("running", func(st Stats) bool { return st.Running == 1 })
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- h.s.Shutdown(ctx)
	}()
	evs, err := readSSE(resp.Body)
	resp.Body.Close()
	if err != nil || len(evs) != 8 {
		t.Errorf("stream during shutdown: %d events, err %v", len(evs), err)
	}
	h.tr.CloseIdleConnections()
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if st := h.s.Stats(); st.Completed != 1 || st.Aborted != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := h.s.Serve(fasthttputil.NewInmemoryListener()); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v", err)
	}
}

// TestShutdownExpired: when ctx ends first, requests are aborted.
func TestShutdownExpired(t *testing.T) {
	h := start(t, fast(), false)
	resp := h.mustPost("/v1/chat/completions", `{"stream":true}`, HeaderTTFT, "1000h")
	h.waitStats("running", func(st Stats) bool { return st.Running == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if st := h.s.Stats(); st.Aborted != 1 || st.Open != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestHandlerMounted: Handler works in someone else's fasthttp server, with
// a fasthttp client reading the stream; Close still ends its requests.
func TestHandlerMounted(t *testing.T) {
	s := New(fast())
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: s.Handler, MaxIdleWorkerDuration: 100 * time.Millisecond}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	c := &fasthttp.Client{
		Dial:                func(string) (net.Conn, error) { return ln.Dial() },
		MaxIdleConnDuration: 50 * time.Millisecond, // its cleaner goroutine exits soon after
	}

	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://sim/v1/chat/completions")
	req.Header.SetMethod("POST")
	req.Header.Set(HeaderOutputTokens, "6")
	req.SetBodyString(`{"stream":true,"stream_options":{"include_usage":true}}`)
	resp.StreamBody = true
	if err := c.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	evs, err := readSSE(resp.BodyStream())
	_ = resp.CloseBodyStream()
	if err != nil || len(evs) != 1+6+1+1+1 {
		t.Errorf("%d events, err %v", len(evs), err)
	}

	_ = s.Close()
	c.CloseIdleConnections()
	if err := srv.Shutdown(); err != nil {
		t.Error(err)
	}
	if err := <-served; err != nil {
		t.Error(err)
	}
	checkInvariant(t, s.Stats())
}

// TestUpdate: parameters change at run time; zero fields keep defaults.
func TestUpdate(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	s.Update(func(c *Config) { c.OverloadFactor = 3; c.RateLimitRPS = 5 })
	c := s.Config()
	if c.OverloadFactor != 3 || c.RateLimitRPS != 5 || c.RateLimitBurst != 5 || c.BaseTTFT != DefaultBaseTTFT || c.Schedule[0].Capacity != DefaultCapacity {
		t.Errorf("config %+v", c)
	}
	s.Update(func(c *Config) { c.RateLimitRPS = 0; c.TimeScale = 9 })
	if c := s.Config(); c.RateLimitRPS != 0 || c.TimeScale != 1 {
		t.Errorf("config %+v", c)
	}
}
