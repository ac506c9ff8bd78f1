package proxy

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
)

// upstream is one upstream of a provider as the request path sends to it:
// its connection pool, where requests go and the credentials and headers
// they carry. Immutable once built; the adaptive state of the same
// upstream (limit, breaker, quota) is the adaptive.Upstream of the same
// name, kept across reloads.
type upstream struct {
	name      string
	url       string // configured base URL
	client    *fasthttp.HostClient
	scheme    []byte
	host      []byte // Host header value sent upstream
	basePath  []byte // base path without trailing slash ("" for none)
	authName  []byte // header carrying the injected key; nil = pass the client's
	authValue []byte
	headers   [][2][]byte // extra headers, set on every request to it
	nameHdr   []byte      // the upstream's name, for HeaderUpstream
	spanAttrs []attribute.KeyValue
}

// HeaderUpstream names, on every answer relayed from an upstream of a
// provider configured with upstreams:, the upstream that served it (its
// configured name). Sluice's own answers do not carry it.
const HeaderUpstream = "X-Sluice-Upstream"

var hdrUpstream = []byte(HeaderUpstream)

// upstreamConfigs returns the upstreams of pc as one list: its
// upstreams: entries, or its one upstream: as a default entry named
// adaptive.SingleUpstream with the provider's key and headers.
func upstreamConfigs(pc *config.Provider) []config.Upstream {
	if len(pc.Upstreams) > 0 {
		return pc.Upstreams
	}
	uc := config.DefaultUpstream()
	uc.Name, uc.URL, uc.APIKey, uc.Headers = adaptive.SingleUpstream, pc.Upstream, pc.APIKey, pc.Headers
	return []config.Upstream{uc}
}

// providerSettings are everything adaptive builds for provider pc: its
// limit, queue, rate, retries and breaker blocks as configured, and the
// settings of each of its upstreams.
func providerSettings(pc *config.Provider) adaptive.ProviderSettings {
	s := adaptive.ProviderSettings{
		LimiterSettings: adaptive.LimiterSettings{Limit: pc.Limit, Queue: pc.Queue},
		Rate:            pc.Rate,
		Retry:           pc.Retries,
		Breaker:         pc.Breaker,
	}
	for _, uc := range upstreamConfigs(pc) {
		us := uc.Upstream
		us.Passthrough = passthroughOf(pc, &uc)
		s.Upstreams = append(s.Upstreams, us)
	}
	return s
}

// buildUpstream builds one upstream of pc. An upstreams: entry's key
// replaces the provider's, and its headers are set over the provider's.
func buildUpstream(pc *config.Provider, uc config.Upstream, hc *fasthttp.HostClient) *upstream {
	u, _ := url.Parse(uc.URL)
	up := &upstream{
		name:     uc.Name,
		url:      uc.URL,
		client:   hc,
		scheme:   []byte(u.Scheme),
		host:     []byte(u.Host),
		basePath: []byte(strings.TrimSuffix(u.EscapedPath(), "/")),
		nameHdr:  []byte(uc.Name),
	}
	key := string(uc.APIKey)
	if key == "" {
		key = string(pc.APIKey)
	}
	if key != "" {
		if pc.Auth == config.AuthXAPIKey {
			up.authName, up.authValue = []byte("x-api-key"), []byte(key)
		} else {
			up.authName, up.authValue = []byte("Authorization"), []byte("Bearer "+key)
		}
	}
	headers := maps.Clone(pc.Headers)
	if len(pc.Upstreams) > 0 {
		if headers == nil {
			headers = map[string]string{}
		}
		maps.Copy(headers, uc.Headers)
	}
	for k, v := range headers {
		up.headers = append(up.headers, [2][]byte{[]byte(k), []byte(v)})
	}
	up.spanAttrs = upstreamSpanAttrs(up)
	return up
}

// upstreamOf returns the request path's view of the upstream a picked
// attempt goes to: by its position, checked by name (a reload may have
// reordered the set since p was built), else by name; nil when p does not
// have it (added by a reload after p was built).
func (p *provider) upstreamOf(u *adaptive.Upstream) *upstream {
	if i := u.Index(); i < len(p.ups) && p.ups[i].name == u.Name() {
		return p.ups[i]
	}
	for _, up := range p.ups {
		if up.name == u.Name() {
			return up
		}
	}
	return nil
}

// clientKey identifies an upstream's pool across reloads: a reload that
// changes none of these keeps the pool and its idle connections. The
// provider's and the upstream's names are part of it: every upstream of
// every provider has its own pool, sized for its own ceiling, even when
// several share an address (a shared pool sized for one ceiling starved
// the others). caPEM is the content of tls.ca_file, so a rotated CA file
// takes effect on reload.
func clientKey(pc *config.Provider, uc *config.Upstream, caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return fmt.Sprintf("%s|%s|%s|%d|%d|%s|%s|%s|%s|%x", pc.Name, uc.Name, uc.URL, pc.Limit.Ceiling, uc.Ceiling,
		pc.Timeouts.Connect, pc.Timeouts.Total, pc.Timeouts.FirstToken, pc.TLS.ServerName, sum[:8])
}

// upstreamPools returns the pool of every upstream of every provider of
// cfg, keyed by clientKey, and each provider's pools in upstream order:
// the pools in use when their key is unchanged, new ones otherwise. It
// reads tls.ca_file. Nothing is changed on s.
func (s *Server) upstreamPools(cfg *config.Config) (map[string]*fasthttp.HostClient, [][]*fasthttp.HostClient, error) {
	var errs []error
	clients := make(map[string]*fasthttp.HostClient, len(cfg.Providers))
	byProvider := make([][]*fasthttp.HostClient, len(cfg.Providers))
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
		for _, uc := range upstreamConfigs(pc) {
			key := clientKey(pc, &uc, caPEM)
			hc := s.clients[key]
			if hc == nil {
				var err error
				if hc, err = newHostClient(pc, &uc, upstreamTLSConfig(pc, uc.URL, pool)); err != nil {
					errs = append(errs, fmt.Errorf("providers[%d] (%s): upstream %s: %w", i, pc.Name, uc.Name, err))
					continue
				}
			}
			clients[key] = hc
			byProvider[i] = append(byProvider[i], hc)
		}
	}
	return clients, byProvider, errors.Join(errs...)
}

// newHostClient builds the connection pool of one upstream. Sluice uses
// it as a pool only: every request goes through stream.roundTrip, which
// lets a client disconnect, a timeout or shutdown close the upstream
// connection at any point, including while waiting for response headers.
// tlsCfg is nil for an http upstream.
func newHostClient(pc *config.Provider, uc *config.Upstream, tlsCfg *tls.Config) (*fasthttp.HostClient, error) {
	u, err := url.Parse(uc.URL)
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
	pool := &stepState{}
	ceiling := pc.Limit.Ceiling
	if uc.Ceiling > 0 {
		ceiling = min(ceiling, uc.Ceiling)
	}
	hc := &fasthttp.HostClient{
		Addr: addr,
		// TLS is set up by dialUpstream, under the connect timeout; fasthttp
		// would otherwise shake hands lazily at the first write, with no
		// read deadline.
		IsTLS: false,
		Dial: func(a string) (net.Conn, error) {
			return dialUpstream(a, connect, tlsCfg, pool)
		},
		// A stream holds its connection for its whole life: the pool must
		// hold at least the ceiling, plus room for connections being closed.
		MaxConns:           ceiling + ceiling/4 + 4,
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

// upstreamTLSConfig is the verified TLS setup of an https upstream at
// rawURL: the system roots, or only the CAs of tls.ca_file; the
// certificate must name tls.server_name, or the upstream's host. It
// returns nil for http.
func upstreamTLSConfig(pc *config.Provider, rawURL string, pool *x509.CertPool) *tls.Config {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" {
		return nil
	}
	name := pc.TLS.ServerName
	if name == "" {
		name = u.Hostname()
	}
	return &tls.Config{ServerName: name, RootCAs: pool, MinVersion: tls.VersionTLS12}
}
