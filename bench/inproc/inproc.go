// Package inproc runs a simulated provider and Sluice in front of it in
// the bench process, each on its own loopback listener, with Sluice's
// admin endpoint on a third when asked. bench/fair and bench/scenario run
// their worlds on it. bench sees Sluice as an operator does: through its
// config (Apply) and /admin/status.
package inproc

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/proxy/admin"
)

// Options say what to start.
type Options struct {
	// Sim is the simulated provider's config.
	Sim sim.Config
	// Proxy are Sluice's options (a tracer provider, for one).
	Proxy proxy.Options
	// Config returns Sluice's config given the provider's base URL
	// ("http://127.0.0.1:port"); its listeners are not used: the stack
	// serves Sluice on listeners of its own.
	Config func(simURL string) *config.Config
	// Admin serves Sluice's admin endpoint (/admin/status, /healthz,
	// /readyz) too, for Status.
	Admin bool
}

// Stack is a simulated provider with Sluice in front of it, on loopback.
type Stack struct {
	Sim    *sim.Server
	SimURL string // the provider's base URL, directly
	Proxy  *proxy.Server
	URL    string // Sluice's base URL: the load's target, plus a path

	simLn    net.Listener
	fs       *fasthttp.Server
	ln       net.Listener
	adminFS  *fasthttp.Server
	adminLn  net.Listener
	admin    *fasthttp.HostClient // to adminLn
	served   sync.WaitGroup
	closeOne sync.Once
}

// Start starts the provider, then Sluice with o.Config applied. On error
// whatever started is stopped.
func Start(o Options) (_ *Stack, err error) {
	st := &Stack{}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	st.Sim = sim.New(o.Sim)
	if st.simLn, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	st.SimURL = "http://" + st.simLn.Addr().String()
	st.served.Go(func() { _ = st.Sim.Serve(st.simLn) })

	st.Proxy = proxy.New(o.Proxy)
	if err = st.Proxy.Apply(o.Config(st.SimURL)); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if st.fs, st.ln, err = st.serve(proxy.NewFastHTTPServer(st.Proxy)); err != nil {
		return nil, err
	}
	st.URL = "http://" + st.ln.Addr().String()
	if o.Admin {
		if st.adminFS, st.adminLn, err = st.serve(&fasthttp.Server{Handler: admin.Handler(st.Proxy, admin.Options{})}); err != nil {
			return nil, err
		}
		st.admin = &fasthttp.HostClient{Addr: st.adminLn.Addr().String(), MaxConns: 1}
	}
	return st, nil
}

// serve serves fs on a new loopback listener until Close.
func (st *Stack) serve(fs *fasthttp.Server) (*fasthttp.Server, net.Listener, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	// fasthttp's worker-pool janitor outlives Serve by this long.
	fs.MaxIdleWorkerDuration = 100 * time.Millisecond
	st.served.Go(func() { _ = fs.Serve(ln) })
	return fs, ln, nil
}

// Status decodes Sluice's /admin/status document into v (the caller's
// own type: bench decodes the JSON, not Sluice's Go type). The stack must
// have been started with Admin.
func (st *Stack) Status(v any) error {
	if st.admin == nil {
		return fmt.Errorf("/admin/status: the stack serves no admin endpoint")
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + st.admin.Addr + "/admin/status")
	if err := st.admin.DoTimeout(req, resp, 5*time.Second); err != nil {
		return fmt.Errorf("/admin/status: %w", err)
	}
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		return fmt.Errorf("/admin/status: status %d", code)
	}
	if err := json.Unmarshal(resp.Body(), v); err != nil {
		return fmt.Errorf("/admin/status: %w", err)
	}
	return nil
}

// Close stops Sluice (cutting what is left) and the provider, and waits
// for their servers to return. Closing twice is closing once.
func (st *Stack) Close() {
	st.closeOne.Do(st.close)
}

func (st *Stack) close() {
	if st.Proxy != nil {
		st.Proxy.Drain()
		st.Proxy.CutStreams()
	}
	for _, s := range []struct {
		fs *fasthttp.Server
		ln net.Listener
	}{{st.fs, st.ln}, {st.adminFS, st.adminLn}} {
		if s.fs != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_ = s.fs.ShutdownWithContext(ctx)
			cancel()
		} else if s.ln != nil {
			s.ln.Close()
		}
	}
	if st.admin != nil {
		st.admin.CloseIdleConnections()
	}
	if st.Proxy != nil {
		st.Proxy.CutStreams()
		st.Proxy.Close()
	}
	if st.Sim != nil {
		_ = st.Sim.Close()
	} else if st.simLn != nil {
		st.simLn.Close()
	}
	st.served.Wait()
}
