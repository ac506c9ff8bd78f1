package proxy

import (
	"crypto/tls"
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
	flows     *flowRules   // reads a request's flow for the queue (flow.go)
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

// clientKey is what makes two providers able to share one HostClient: same
// address, TLS and connection settings.
func clientKey(pc *config.Provider) string {
	return fmt.Sprintf("%s|%d|%s|%s|%s", pc.Upstream, pc.Limit.Ceiling, pc.Timeouts.Connect, pc.Timeouts.Total, pc.Timeouts.FirstToken)
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

// upstreamDialer is shared by every provider's pool (and across reloads),
// so its DNS cache and janitor goroutine exist once.
var upstreamDialer = &fasthttp.TCPDialer{}

// newHostClient builds the upstream connection pool for a provider. Sluice
// uses it as a pool only: every request goes through stream.roundTrip,
// which lets a client disconnect, a timeout or shutdown close the upstream
// connection at any point, including while waiting for response headers.
func newHostClient(pc *config.Provider) (*fasthttp.HostClient, error) {
	u, err := url.Parse(pc.Upstream)
	if err != nil {
		return nil, err
	}
	isTLS := u.Scheme == "https"
	addr := u.Host
	if u.Port() == "" {
		if isTLS {
			addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	connect := pc.Timeouts.Connect
	hc := &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: isTLS,
		Dial: func(a string) (net.Conn, error) {
			return upstreamDialer.DialTimeout(a, connect)
		},
		// A stream holds its connection for its whole life: the pool must
		// hold at least the ceiling, plus room for connections being closed.
		MaxConns:           pc.Limit.Ceiling + pc.Limit.Ceiling/4 + 4,
		MaxConnWaitTimeout: pc.Timeouts.FirstToken,
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
	if isTLS {
		hc.TLSConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	return hc, nil
}
