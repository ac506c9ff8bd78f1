package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
)

// certStore holds the client listener's certificate. Every new
// connection's handshake reads it and a reload replaces it, so rotated
// files are served from the next connection on; connections already open
// keep the certificate they were handshaken with and are not dropped.
type certStore struct {
	cur atomic.Pointer[config.KeyPair]
}

func newCertStore(kp *config.KeyPair) *certStore {
	c := &certStore{}
	c.cur.Store(kp)
	return c
}

// set replaces the certificate and reports whether it is a different one.
func (c *certStore) set(kp *config.KeyPair) bool {
	old := c.cur.Swap(kp).Certificate()
	return old == nil || !bytes.Equal(old.Certificate[0], kp.Certificate().Certificate[0])
}

// expiryMetric exports when the certificate served now expires, read at
// scrape time, so that an alert can fire before clients start failing
// their handshakes (a reload that replaces the files moves it).
func (c *certStore) expiryMetric() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_tls_certificate_expiry_timestamp_seconds",
		Help: "Unix time when the client listener's TLS certificate (the leaf) expires. Absent without tls.",
	}, func() float64 { return float64(c.cur.Load().NotAfter().Unix()) })
}

func (c *certStore) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cur.Load().Certificate(), nil
}

// tlsListener serves TLS on ln with the certificate in certs. It offers
// HTTP/1.1 only in ALPN (the proxy speaks HTTP/1.1), and TLS 1.2 or later.
// The handshake runs on the connection's first read, under the server's
// read timeout, so a client that never finishes it holds nothing but its
// socket until then.
func tlsListener(ln net.Listener, certs *certStore) net.Listener {
	return &tlsConnListener{Listener: ln, cfg: &tls.Config{
		GetCertificate: certs.getCertificate,
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
	}}
}

type tlsConnListener struct {
	net.Listener
	cfg *tls.Config
}

func (l *tlsConnListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return watchableTLSConn{tls.Server(c, l.cfg)}, nil
}

// watchableTLSConn is a TLS connection that also exposes its TCP socket as
// a syscall.Conn, so that the proxy's disconnect watcher can register the
// socket and notice a client that leaves while its upstream is silent, as
// on a plain listener. Reads and writes still go through TLS; fasthttp
// recognises the embedded *tls.Conn (RequestCtx.IsTLS).
type watchableTLSConn struct {
	*tls.Conn
}

func (c watchableTLSConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.NetConn().(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}
