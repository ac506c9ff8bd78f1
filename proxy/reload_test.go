package proxy

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// A reload with a bad config is rejected whole and the old one keeps
// serving; a good reload keeps an unchanged provider's limiter, so permits
// held by streams in flight stay counted across the swap.
func TestReloadKeepsServingAndKeepsPermits(t *testing.T) {
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = 2, 2
		p.Queue.MaxWaiting = 0
	})
	s := startSluice(t, cfg)
	c := httpClient()

	// A stream in flight holds one permit across the reloads below.
	resp := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-events": "20", "x-gap": "50ms"})
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	lim := s.srv.limiters.Limiter("fake")
	if lim.Stats().Inflight != 1 {
		t.Fatalf("inflight = %d, want 1", lim.Stats().Inflight)
	}

	bad := testConfig(up.url(), func(p *config.Provider) { p.Limit.Ceiling = 0 })
	if err := s.srv.Apply(bad); err == nil {
		t.Fatal("bad config applied")
	}
	if s.srv.Config() != cfg {
		t.Fatal("a rejected reload replaced the config")
	}

	// Good reload: same provider, a new prefix and a higher ceiling.
	next := testConfig(up.url(), func(p *config.Provider) {
		p.Match.PathPrefix = "/v2"
		p.Limit.Ceiling, p.Limit.Initial = 3, 3
		p.Queue.MaxWaiting = 0
	})
	if err := s.srv.Apply(next); err != nil {
		t.Fatal(err)
	}
	if s.srv.limiters.Limiter("fake") != lim {
		t.Fatal("reload replaced the limiter of an unchanged provider")
	}
	if st := lim.Stats(); st.Inflight != 1 || st.Ceiling != 3 {
		t.Fatalf("after reload: %+v, want the held permit and ceiling 3", st)
	}
	// The old prefix is gone, the new one routes.
	old := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"})
	io.Copy(io.Discard, old.Body)
	old.Body.Close()
	if old.StatusCode != 404 {
		t.Fatalf("old prefix after reload: %d", old.StatusCode)
	}
	// Two more fit next to the held one (ceiling 3), a third is rejected.
	var open []*http.Response
	for i := 0; i < 2; i++ {
		r := post(t, c, s.base+"/v2/v1/chat/completions", map[string]string{"x-events": "20", "x-gap": "50ms"})
		if r.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, r.StatusCode)
		}
		open = append(open, r)
	}
	r := post(t, c, s.base+"/v2/v1/chat/completions", map[string]string{"x-json": "1"})
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if r.StatusCode != 503 || r.Header.Get(HeaderRejected) != "queue_full" {
		t.Fatalf("fourth request: %d %q, want 503 queue_full", r.StatusCode, r.Header.Get(HeaderRejected))
	}
	// The stream that started before the reloads finishes normally.
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream across reload: err %v, done %v", err, strings.Contains(string(rest), "[DONE]"))
	}
	for _, o := range open {
		io.Copy(io.Discard, o.Body)
		o.Body.Close()
	}
	testutil.Eventually(t, "permits back to 0", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
}

// A provider removed by a reload disappears from routing; its streams in
// flight finish on the snapshot they started with.
func TestReloadRemovingProviderLetsStreamsFinish(t *testing.T) {
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), nil)
	two := *cfg
	other := cfg.Providers[0]
	other.Name, other.Match.PathPrefix = "other", "/other"
	two.Providers = append([]config.Provider{other}, cfg.Providers...)
	s := startSluice(t, &two)
	c := httpClient()
	resp := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-events": "10", "x-gap": "30ms"})
	defer resp.Body.Close()
	one := *cfg
	one.Providers = []config.Provider{other}
	if err := s.srv.Apply(&one); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("stream of a removed provider: err %v", err)
	}
	gone := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"})
	io.Copy(io.Discard, gone.Body)
	gone.Body.Close()
	if gone.StatusCode != 404 {
		t.Fatalf("removed provider still routed: %d", gone.StatusCode)
	}
}

// Requests queued across a reload that raises the ceiling are sent with the
// new settings: the upstream sees them all at once, not squeezed through the
// old snapshot's smaller connection pool (ceiling 1: 5 connections).
func TestQueuedRequestsUseReloadedPool(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 1, 1, 1
		p.Queue.MaxWaiting, p.Queue.MaxWait = 20, 10*time.Second
	}))
	c := httpClient()
	lim := s.srv.limiters.Limiter("fake")
	done := make(chan struct{}, 10)
	for i := 0; i < 10; i++ {
		go func() {
			resp := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-events": "10", "x-gap": "500ms"})
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- struct{}{}
		}()
	}
	testutil.Eventually(t, "nine queued", 5*time.Second, func() bool { return lim.Stats().Waiting == 9 })
	next := testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 10, 10, 1
		p.Queue.MaxWaiting, p.Queue.MaxWait = 20, 10*time.Second
	})
	if err := s.srv.Apply(next); err != nil {
		t.Fatal(err)
	}
	// Each stream lasts 5 s: long enough that, on a loaded machine, the
	// first one is still running when the last one reaches the upstream.
	testutil.Eventually(t, "all ten at the upstream at once", 15*time.Second, func() bool { return up.inflight.Load() == 10 })
	for i := 0; i < 10; i++ {
		<-done
	}
}
