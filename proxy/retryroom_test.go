package proxy

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// TestRetryWaitsForRoomUnderTheLimit: a provider with room for two
// streams refuses a third (529 overloaded). The refusal cuts the limit to
// two, below the three permits in use (the refused request keeps its own
// across its attempts). Its retry must wait until a stream has ended and
// the permits in use are within the limit: sent when its backoff ended,
// it reached a provider just as full, was refused again and its client
// got the 529.
func TestRetryWaitsForRoomUnderTheLimit(t *testing.T) {
	t.Parallel()
	var open, refused atomic.Int64
	arrived := make(chan struct{}, 8)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // a failing run does not hold its streams for 10s
	up := newProgUpstream(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		if open.Add(1) > 2 {
			open.Add(-1)
			refused.Add(1)
			ctx.SetStatusCode(529)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(overloaded)
			arrived <- struct{}{}
			return
		}
		arrived <- struct{}{}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer open.Add(-1)
			w.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
			if w.Flush() != nil {
				return
			}
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
			w.WriteString("data: [DONE]\n\n")
			w.Flush()
		})
	})
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Algorithm = settings.AlgorithmAIMD
		p.Limit.Initial, p.Limit.Ceiling = 3, 3
		p.Retries.MaxAttempts = 2
		p.Retries.BackoffBase, p.Retries.BackoffMax = 10*time.Millisecond, 10*time.Millisecond
	}))
	c := httpClient()
	type result struct {
		status int
		err    error
	}
	send := func() chan result {
		ch := make(chan result, 1)
		go func() {
			req, _ := http.NewRequest("POST", s.base+"/fake/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				ch <- result{err: err}
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ch <- result{status: resp.StatusCode, err: err}
		}()
		return ch
	}
	waitArrival := func(what string) {
		t.Helper()
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s never reached the provider", what)
		}
	}
	// One at a time, so that each request's permit count is its place at
	// the provider: the third is refused with three in use.
	a := send()
	waitArrival("stream A")
	b := send()
	waitArrival("stream B")
	third := send()
	waitArrival("the third request")
	// Its retry is due after 10ms of backoff; give it ample time to be
	// sent (and refused) if it does not wait for room.
	time.Sleep(300 * time.Millisecond)
	if n := refused.Load(); n != 1 {
		t.Fatalf("the provider refused %d attempts with both streams still running, want 1: the retry went with the permits in use over the cut limit", n)
	}
	free() // A and B end: room under the limit of two
	for name, ch := range map[string]chan result{"A": a, "B": b, "third": third} {
		select {
		case r := <-ch:
			if r.err != nil || r.status != 200 {
				t.Fatalf("request %s: status %d, err %v; want 200", name, r.status, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("request %s never ended", name)
		}
	}
	if n := refused.Load(); n != 1 {
		t.Fatalf("the provider refused %d attempts, want 1 (the retry sent once there was room)", n)
	}
}
