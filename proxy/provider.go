package proxy

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
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
	name      string
	cfg       config.Provider
	dialect   string // config.DialectAuto, DialectOpenAI or DialectAnthropic
	limiter   *adaptive.Limiter
	client    *fasthttp.HostClient
	scheme    []byte
	host      []byte // Host header value sent upstream
	basePath  []byte // upstream base path without trailing slash ("" for none)
	authName  []byte // header carrying the injected key; nil = pass the client's
	authValue []byte
	headers   [][2][]byte // extra headers, set on every upstream request
	errs      *errorBodies
	timeouts  config.Timeouts
	tel       *providerTel // metric handles and tracing, resolved at Apply; nil = off
}

// dialectFor picks the wire format of a request: fixed by the provider's
// dialect, or by the request path for dialect auto (/v1/messages is
// Anthropic). An OpenAI provider still distinguishes Chat Completions from
// the Responses API by path.
func (p *provider) dialectFor(path []byte) feedback.Dialect {
	switch p.dialect {
	case config.DialectAnthropic:
		return feedback.Anthropic
	case config.DialectOpenAI:
		if d := feedback.DialectForPath(path); d != feedback.Anthropic {
			return d
		}
		return feedback.OpenAIChat
	}
	return feedback.DialectForPath(path)
}

// clientKey identifies a provider's upstream pool across reloads: a
// reload that changes none of these keeps the pool and its idle
// connections. The provider's name is part of it: every provider has its
// own pool, sized for its own ceiling, even when several share an upstream
// (a shared pool sized for one ceiling starved the others). caPEM is the
// content of tls.ca_file, so a rotated CA file takes effect on reload.
func clientKey(pc *config.Provider, caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return fmt.Sprintf("%s|%s|%d|%s|%s|%s|%s|%x", pc.Name, pc.Upstream, pc.Limit.Ceiling,
		pc.Timeouts.Connect, pc.Timeouts.Total, pc.Timeouts.FirstToken, pc.TLS.ServerName, sum[:8])
}

// buildProvider builds the request path's view of pc. pc is valid (its
// upstream URL parses: config validated it).
func buildProvider(pc *config.Provider, lim *adaptive.Limiter, client *fasthttp.HostClient) *provider {
	u, _ := url.Parse(pc.Upstream)
	p := &provider{
		name:     pc.Name,
		cfg:      *pc,
		limiter:  lim,
		client:   client,
		scheme:   []byte(u.Scheme),
		host:     []byte(u.Host),
		basePath: []byte(strings.TrimSuffix(u.EscapedPath(), "/")),
		errs:     buildErrorBodies(pc.Name),
		timeouts: pc.Timeouts,
	}
	p.dialect = pc.Dialect
	if key := string(pc.APIKey); key != "" {
		if pc.Auth == config.AuthXAPIKey {
			p.authName, p.authValue = []byte("x-api-key"), []byte(key)
		} else {
			p.authName, p.authValue = []byte("Authorization"), []byte("Bearer "+key)
		}
	}
	for k, v := range pc.Headers {
		p.headers = append(p.headers, [2][]byte{[]byte(k), []byte(v)})
	}
	return p
}

// upstreamPools returns the upstream pool of every provider of cfg, keyed
// by clientKey (keys, in provider order): the pools in use when their key
// is unchanged, new ones otherwise. It reads tls.ca_file. Nothing is
// changed on s.
func (s *Server) upstreamPools(cfg *config.Config) (map[string]*fasthttp.HostClient, []string, error) {
	var errs []error
	clients := make(map[string]*fasthttp.HostClient, len(cfg.Providers))
	keys := make([]string, len(cfg.Providers))
	for i := range cfg.Providers {
		pc := &cfg.Providers[i]
		var pool *x509.CertPool
		var caPEM []byte
		if pc.TLS.CAFile != "" {
			var err error
			if pool, caPEM, err = config.LoadCAFile(pc.TLS.CAFile); err != nil {
				errs = append(errs, fmt.Errorf("providers[%d].tls.ca_file: %w", i, err))
				continue
			}
		}
		key := clientKey(pc, caPEM)
		keys[i] = key
		hc := s.clients[key]
		if hc == nil {
			var err error
			if hc, err = newHostClient(pc, upstreamTLSConfig(pc, pool)); err != nil {
				errs = append(errs, fmt.Errorf("providers[%d] (%s): upstream: %w", i, pc.Name, err))
				continue
			}
		}
		clients[key] = hc
	}
	return clients, keys, errors.Join(errs...)
}

// upstreamDialer is shared by every provider's pool (and across reloads),
// so its DNS cache and janitor goroutine exist once.
var upstreamDialer = &fasthttp.TCPDialer{}

// errConnect marks a failure to set up an upstream connection (TCP connect
// or TLS handshake): the request ends as upstream_unreachable.
var errConnect = errors.New("upstream connect failed")

// newHostClient builds the upstream connection pool for a provider. Sluice
// uses it as a pool only: every request goes through stream.roundTrip,
// which lets a client disconnect, a timeout or shutdown close the upstream
// connection at any point, including while waiting for response headers.
// tlsCfg is nil for an http upstream.
func newHostClient(pc *config.Provider, tlsCfg *tls.Config) (*fasthttp.HostClient, error) {
	u, err := url.Parse(pc.Upstream)
	if err != nil {
		return nil, err
	}
	addr := u.Host
	if u.Port() == "" {
		if tlsCfg != nil {
			addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	connect := pc.Timeouts.Connect
	hc := &fasthttp.HostClient{
		Addr: addr,
		// TLS is set up by dialUpstream, under the connect timeout; fasthttp
		// would otherwise shake hands lazily at the first write, with no
		// read deadline.
		IsTLS: false,
		Dial: func(a string) (net.Conn, error) {
			return dialUpstream(a, connect, tlsCfg)
		},
		// A stream holds its connection for its whole life: the pool must
		// hold at least the ceiling, plus room for connections being closed.
		MaxConns:           pc.Limit.Ceiling + pc.Limit.Ceiling/4 + 4,
		MaxConnWaitTimeout: pc.Timeouts.FirstToken,
		// Last in, first out: taking a connection is O(1) (FIFO shifts the
		// whole idle list, up to the ceiling, on every request), the
		// connections in use stay warm and those beyond the working set
		// go idle and are closed after MaxIdleConnDuration.
		ConnPoolStrategy: fasthttp.LIFO,
		// Keep idle connections shorter than providers' own idle timeouts
		// (commonly 60-120 s) so a reused connection is rarely stale.
		MaxIdleConnDuration:           30 * time.Second,
		MaxIdemponentCallAttempts:     1,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true,
		ReadBufferSize:                16 << 10,
		WriteBufferSize:               16 << 10,
	}
	return hc, nil
}

// upstreamTLSConfig is the verified TLS setup of an https upstream: the
// system roots, or only the CAs of tls.ca_file; the certificate must name
// tls.server_name, or the upstream's host. It returns nil for http.
func upstreamTLSConfig(pc *config.Provider, pool *x509.CertPool) *tls.Config {
	u, err := url.Parse(pc.Upstream)
	if err != nil || u.Scheme != "https" {
		return nil
	}
	name := pc.TLS.ServerName
	if name == "" {
		name = u.Hostname()
	}
	return &tls.Config{ServerName: name, RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// dialUpstream connects to addr and, for TLS, completes the handshake, all
// within connect: a peer that accepts TCP and never answers the handshake
// fails here, as upstream_unreachable, instead of holding the permit.
func dialUpstream(addr string, connect time.Duration, tlsCfg *tls.Config) (net.Conn, error) {
	deadline := time.Now().Add(connect)
	c, err := upstreamDialer.DialTimeout(addr, connect)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConnect, err)
	}
	if tlsCfg == nil {
		return c, nil
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
	return tc, nil
}
