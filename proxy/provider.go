package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/feedback"
)

// provider is one configured upstream as the request path sees it. It is
// immutable once built; a reload builds a new one. The limiter is shared
// with the previous snapshot's provider of the same name so learned limits
// and permits in use survive a reload.
type provider struct {
	name    string
	cfg     config.Provider
	dialect string // the dialect: setting, a feedback.DialectSpec's Family or auto
	limiter *adaptive.Limiter
	// adm is the provider's admission stack (adm.Limiter == limiter),
	// kept by the registry across reloads; ups are its upstreams as the
	// request path sends to them, in the order of adm.Upstreams.
	adm *adaptive.Provider
	ups []*upstream
	// named: the provider is configured with upstreams:, and answers name
	// the upstream that served them (HeaderUpstream).
	named bool
	// clientID says where a client's key comes from for per-client rate
	// limits (clientIDNone when they are off).
	clientID clientID
	// passthrough: an upstream gets the client's own credentials, so
	// quotas are learned per client account (quotaKeyOf).
	passthrough bool
	errs        *errorBodies
	timeouts    config.Timeouts
	telemetry   *providerTelemetry // metric handles and tracing, resolved at Apply; nil = off
	flows       *flowRules         // reads a request's flow for the queue (flow.go)
	// policies are the client policies at this provider, by
	// clientPolicy.idx (clients.go).
	policies []providerPolicy
}

// dialectFor picks the wire format of a request from the provider's
// dialect: setting and the request path (feedback.DetectDialect).
func (p *provider) dialectFor(path []byte) feedback.Dialect {
	return feedback.DetectDialect(p.dialect, path)
}

// buildProvider builds the request path's view of pc, with its admission
// stack adm and the pool of each of its upstreams (pools, in the order of
// upstreamConfigs). pc is valid (its URLs parse: config validated them).
func buildProvider(pc *config.Provider, adm *adaptive.Provider, pools []*fasthttp.HostClient) *provider {
	p := &provider{
		name:     pc.Name,
		cfg:      *pc,
		dialect:  pc.Dialect,
		limiter:  adm.Limiter,
		adm:      adm,
		named:    len(pc.Upstreams) > 0,
		clientID: clientIDOf(pc.Rate),
		errs:     buildErrorBodies(pc.Name),
		timeouts: pc.Timeouts,
	}
	for i, uc := range upstreamConfigs(pc) {
		p.ups = append(p.ups, buildUpstream(pc, uc, pools[i]))
		p.passthrough = p.passthrough || passthroughOf(pc, &uc)
	}
	return p
}

// upstreamDialer is shared by every provider's pool (and across reloads),
// so its DNS cache and janitor goroutine exist once.
var upstreamDialer = &fasthttp.TCPDialer{}

// errConnect marks a failure to set up an upstream connection (TCP connect
// or TLS handshake): the request ends as upstream_unreachable.
var errConnect = errors.New("upstream connect failed")

// dialUpstream connects to addr and, for TLS, completes the handshake, all
// within connect: a peer that accepts TCP and never answers the handshake
// fails here, as upstream_unreachable, instead of holding the permit.
func dialUpstream(addr string, connect time.Duration, tlsCfg *tls.Config, pool *stepState) (net.Conn, error) {
	deadline := time.Now().Add(connect)
	c, err := upstreamDialer.DialTimeout(addr, connect)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConnect, err)
	}
	fd := connFD(c)
	if tlsCfg == nil {
		return &pooledConn{Conn: c, fd: fd, pool: pool}, nil
	}
	tc := tls.Client(c, tlsCfg)
	if err := tc.SetDeadline(deadline); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", errConnect, err)
	}
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: tls: %w", errConnect, err)
	}
	if err := tc.SetDeadline(time.Time{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", errConnect, err)
	}
	return &pooledConn{Conn: tc, fd: fd, pool: pool}, nil
}

// pooledConn is a connection of an upstream pool. used says a request
// already went out on it, so it may have been closed by the upstream while
// idle in the pool, or hold bytes nobody asked for (send). fd is its
// socket (under TLS too), -1 when unknown; pool is what its pool
// remembers of answers out of step (instep.go). Only the request holding
// the connection touches it.
type pooledConn struct {
	net.Conn
	used bool
	fd   int
	pool *stepState
	peek [1]byte // lookTLS's read
}

// look reports whether anything arrived on an idle connection since its
// last answer was read (ready), and whether that includes the upstream's
// close (closed; true also where that cannot be told apart). Anything on
// an idle HTTP/1.1 connection is the upstream closing it or an answer out
// of step with its requests, which the next request would read as its
// own.
func (pc *pooledConn) look() (ready, closed bool) {
	if pc.fd < 0 {
		return false, false
	}
	ready, closed = idleLook(pc.fd)
	if tc, ok := pc.Conn.(*tls.Conn); ok && ready && !closed {
		return pc.lookTLS(tc)
	}
	return ready, closed
}

// tlsLook bounds lookTLS's read: the bytes are there already (poll said
// so), unless only part of a record is.
const tlsLook = time.Millisecond

// lookTLS tells, for a TLS connection with bytes waiting while idle,
// records of the TLS layer itself (a session ticket, a key update), which
// are no answer and leave it usable, from application data or the end.
// A read timeout leaves a TLS connection usable; the next request sets
// its own deadlines.
func (pc *pooledConn) lookTLS(tc *tls.Conn) (ready, closed bool) {
	_ = tc.SetReadDeadline(time.Now().Add(tlsLook))
	n, err := tc.Read(pc.peek[:])
	switch {
	case n > 0:
		return true, false
	case err == nil || isTimeout(err):
		return false, false
	}
	return true, true
}
