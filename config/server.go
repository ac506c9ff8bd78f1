package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Server bounds what clients of the proxy listener may cost Sluice: the
// size of what they send, how many connections they hold, how long they may
// take to send a request or to accept a response, and how much memory
// Sluice spends buffering bodies for all of them together.
//
// MaxConnections, ReadTimeout and IdleTimeout belong to the listener and
// take effect at the next start; the other keys take effect on reload, for
// requests and connections that arrive afterwards.
type Server struct {
	// MaxRequestBody is the largest request body accepted; a larger one is
	// answered 413 before any of it is buffered. Default 8MiB, 1KiB..1GiB.
	MaxRequestBody ByteSize `yaml:"max_request_body"`
	// MaxResponseBody is the largest non-streaming upstream answer Sluice
	// buffers to meter it (usage, model, error type). A larger answer, or
	// one that does not fit MaxBufferedBytes, is relayed as it arrives,
	// unmetered. Default 8MiB, 64KiB..1GiB.
	MaxResponseBody ByteSize `yaml:"max_response_body"`
	// MaxBufferedBytes is the memory all buffered bodies (request bodies and
	// non-streaming answers) may hold at once. A request whose body does
	// not fit is answered 503. Default 256MiB, 1MiB..1TiB, at least
	// MaxRequestBody.
	MaxBufferedBytes ByteSize `yaml:"max_buffered_bytes"`
	// MaxConnections is the most client connections served at once; more
	// are answered 503 and closed. Default 4096, 1..1000000. Restart.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnsPerIP is the most client connections one IP address may hold
	// at once; 0 turns the cap off. At the cap (or at MaxConnections) a new
	// connection closes the longest-idle one of that address (of any
	// address), and is refused only when none is idle. Default 1024,
	// 0..1000000.
	MaxConnsPerIP int `yaml:"max_conns_per_ip"`
	// ReadTimeout bounds reading a request's headers from their first
	// byte, and its body after them (BodyTimeout never runs past it).
	// Default 60s, 1ms..1h. Restart, for the headers.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// BodyTimeout is how long a request body may take to arrive after its
	// headers, extended by one second for every MinBodyRate bytes received;
	// a body still incomplete then (or up to an eighth of BodyTimeout
	// later) is answered 408 and its connection closed. ReadTimeout still
	// bounds the whole request. Default 10s,
	// 1ms..1h.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// MinBodyRate is the rate (bytes per second) at which a body earns
	// time beyond BodyTimeout; 0: none, the body has BodyTimeout whole.
	// Default 64KiB, 0..1GiB.
	MinBodyRate ByteSize `yaml:"min_body_rate"`
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request before Sluice closes it. Default 120s, 1ms..1h. Restart.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WriteTimeout is how long a client may accept no response bytes at all
	// before Sluice ends its response and frees its permit (a client that
	// stopped reading, or reads too slowly to take the next event). It
	// bounds each write, not the whole response. Default 30s, 1ms..1h.
	WriteTimeout time.Duration `yaml:"write_timeout"`
}

// DefaultServer returns the server block's defaults.
func DefaultServer() Server {
	return Server{
		MaxRequestBody:   8 * MiB,
		MaxResponseBody:  8 * MiB,
		MaxBufferedBytes: 256 * MiB,
		MaxConnections:   4096,
		MaxConnsPerIP:    1024,
		ReadTimeout:      60 * time.Second,
		BodyTimeout:      10 * time.Second,
		MinBodyRate:      64 * KiB,
		IdleTimeout:      120 * time.Second,
		WriteTimeout:     30 * time.Second,
	}
}

func (v *validator) server(s Server) {
	v.sizeRange("server.max_request_body", s.MaxRequestBody, KiB, GiB)
	v.sizeRange("server.max_response_body", s.MaxResponseBody, 64*KiB, GiB)
	v.sizeRange("server.max_buffered_bytes", s.MaxBufferedBytes, MiB, TiB)
	if s.MaxBufferedBytes < s.MaxRequestBody && s.MaxBufferedBytes >= MiB {
		v.add("server.max_buffered_bytes", "must be at least max_request_body (%s), got %s", s.MaxRequestBody, s.MaxBufferedBytes)
	}
	if s.MaxConnections < 1 || s.MaxConnections > 1000000 {
		v.add("server.max_connections", "must be between 1 and 1000000, got %d", s.MaxConnections)
	}
	if s.MaxConnsPerIP < 0 || s.MaxConnsPerIP > 1000000 {
		v.add("server.max_conns_per_ip", "must be between 0 (off) and 1000000, got %d", s.MaxConnsPerIP)
	}
	v.durRange("server.read_timeout", s.ReadTimeout, time.Millisecond, time.Hour)
	v.durRange("server.body_timeout", s.BodyTimeout, time.Millisecond, time.Hour)
	v.sizeRange("server.min_body_rate", s.MinBodyRate, 0, GiB)
	v.durRange("server.idle_timeout", s.IdleTimeout, time.Millisecond, time.Hour)
	v.durRange("server.write_timeout", s.WriteTimeout, time.Millisecond, time.Hour)
}

// UpstreamTLS configures the TLS connection to an https upstream. The
// upstream's certificate is always verified; these keys only say against
// what.
type UpstreamTLS struct {
	// CAFile is the absolute path of a PEM file of CA certificates. When
	// set, only these CAs are trusted for this upstream (not the system's).
	// Default "": the system's roots. Read at every load and reload.
	CAFile string `yaml:"ca_file"`
	// ServerName is the name sent as SNI and verified in the upstream's
	// certificate. Default "": the upstream URL's host.
	ServerName string `yaml:"server_name"`
}

// upstreamTLS checks a provider's tls block: https upstreams only, an
// absolute, readable ca_file holding at least one certificate, a host
// name or IP address as server_name.
func (v *validator) upstreamTLS(pp string, p *Provider) {
	t := p.TLS
	if t == (UpstreamTLS{}) {
		return
	}
	if strings.HasPrefix(p.Upstream, "http://") {
		v.add(pp+".tls", "is only for https upstreams")
		return
	}
	if t.CAFile != "" {
		if _, _, err := LoadCAFile(t.CAFile); err != nil {
			v.add(pp+".tls.ca_file", "%v", err)
		}
	}
	if t.ServerName != "" && !validHost(t.ServerName) {
		v.add(pp+".tls.server_name", "must be a host name or IP address, got %q", t.ServerName)
	}
}

// LoadCAFile reads a PEM file of CA certificates for [UpstreamTLS].CAFile
// and returns them as a pool, with the file's bytes. Its errors name the
// problem, not the file's content.
func LoadCAFile(path string) (*x509.CertPool, []byte, error) {
	if !filepath.IsAbs(path) {
		return nil, nil, fmt.Errorf("must be an absolute path, got %q", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, nil, fmt.Errorf("cannot read %q: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, nil, fmt.Errorf("%q holds no PEM certificate", path)
	}
	return pool, data, nil
}
