package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testPair is a self-signed certificate for sluice.test, named cn.
type testPair struct {
	cert, key []byte // PEM
	x509      *x509.Certificate
}

func newTestPair(t *testing.T, cn string) testPair {
	t.Helper()
	return newTestPairUntil(t, cn, time.Now().Add(time.Hour))
}

// newTestPairUntil is newTestPair, expiring at notAfter.
func newTestPairUntil(t *testing.T, cn string, notAfter time.Time) testPair {
	t.Helper()
	return newTestPairValid(t, cn, time.Now().Add(-time.Hour), notAfter)
}

// newTestPairValid is newTestPair, valid from notBefore until notAfter.
func newTestPairValid(t *testing.T, cn string, notBefore, notAfter time.Time) testPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		DNSNames:              []string{"sluice.test"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return testPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		x509: c,
	}
}

func writePairFiles(t *testing.T, dir string, cert, key []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsGet sends one request on c and reads the whole answer.
func tlsGet(t *testing.T, c *tls.Conn) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"stream\":true}"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// The client listener serves TLS from tls.cert_file/key_file. A reload
// with new files serves the new certificate to new connections without
// dropping open ones; a reload with a bad pair is rejected and the
// certificate in force keeps serving.
func TestTLSListenerReloadsCertificate(t *testing.T) {
	t.Parallel()
	a, b := newTestPair(t, "cert-a"), newTestPair(t, "cert-b")
	dir := t.TempDir()
	writePairFiles(t, dir, a.cert, a.key)
	up := sseUpstream(t, 2, time.Millisecond)
	p := startConfig(t, `listen: LISTEN
admin: { listen: "off" }
tls: { cert_file: `+filepath.Join(dir, "tls.crt")+`, key_file: `+filepath.Join(dir, "tls.key")+` }
providers:
  - name: fake
    upstream: `+up+`
    match: { path_prefix: /fake }
`, nil)
	roots := x509.NewCertPool()
	roots.AddCert(a.x509)
	roots.AddCert(b.x509)
	dial := func() *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp4", p.addr, &tls.Config{RootCAs: roots, ServerName: "sluice.test", NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatalf("TLS dial: %v\n%s", err, p.logs)
		}
		return c
	}
	served := func(c *tls.Conn) string { return c.ConnectionState().PeerCertificates[0].Subject.CommonName }

	c1 := dial()
	defer c1.Close()
	if got := served(c1); got != "cert-a" {
		t.Fatalf("served %s, want cert-a", got)
	}
	if proto := c1.ConnectionState().NegotiatedProtocol; proto != "http/1.1" {
		t.Errorf("ALPN chose %q, want http/1.1 (Sluice speaks HTTP/1.1)", proto)
	}
	if code := tlsGet(t, c1); code != 200 {
		t.Fatalf("request over TLS: %d", code)
	}

	// New files, SIGHUP: new connections get cert-b, c1 keeps working.
	writePairFiles(t, dir, b.cert, b.key)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "TLS certificate replaced")
	c2 := dial()
	defer c2.Close()
	if got := served(c2); got != "cert-b" {
		t.Fatalf("after reload served %s, want cert-b", got)
	}
	if code := tlsGet(t, c1); code != 200 {
		t.Fatalf("connection opened before the reload: %d", code)
	}

	// A key that does not match: rejected, cert-b keeps serving.
	writePairFiles(t, dir, a.cert, b.key)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "private key does not match public key")
	c3 := dial()
	defer c3.Close()
	if got := served(c3); got != "cert-b" {
		t.Fatalf("after a bad reload served %s, want cert-b", got)
	}
	if code := tlsGet(t, c3); code != 200 {
		t.Fatalf("request after a bad reload: %d", code)
	}
	if !strings.Contains(p.logs.String(), `"msg":"config reload rejected`) {
		t.Errorf("bad pair not reported as a rejected reload:\n%s", p.logs)
	}
}

// A reload that brings an expired certificate, or one not valid yet, is
// rejected with the file and the dates in the log, and the certificate in
// force keeps serving new connections.
func TestTLSReloadRefusesCertificateOutsideValidity(t *testing.T) {
	t.Parallel()
	a := newTestPair(t, "cert-a")
	expired := newTestPairValid(t, "cert-expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	early := newTestPairValid(t, "cert-early", time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour))
	dir := t.TempDir()
	writePairFiles(t, dir, a.cert, a.key)
	up := sseUpstream(t, 2, time.Millisecond)
	certFile := filepath.Join(dir, "tls.crt")
	p := startConfig(t, `listen: LISTEN
admin: { listen: "off" }
tls: { cert_file: `+certFile+`, key_file: `+filepath.Join(dir, "tls.key")+` }
providers:
  - name: fake
    upstream: `+up+`
    match: { path_prefix: /fake }
`, nil)
	roots := x509.NewCertPool()
	roots.AddCert(a.x509)
	for _, c := range []struct {
		pair testPair
		says string
	}{
		{expired, "the certificate in " + certFile + " expired at " + expired.x509.NotAfter.UTC().Format(time.RFC3339)},
		{early, "the certificate in " + certFile + " is not valid before " + early.x509.NotBefore.UTC().Format(time.RFC3339)},
	} {
		writePairFiles(t, dir, c.pair.cert, c.pair.key)
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		p.waitLog(t, c.says)
		conn, err := tls.Dial("tcp4", p.addr, &tls.Config{RootCAs: roots, ServerName: "sluice.test"})
		if err != nil {
			t.Fatalf("after reloading %s: TLS dial: %v\n%s", c.pair.x509.Subject.CommonName, err, p.logs)
		}
		if got := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "cert-a" {
			t.Errorf("after reloading %s served %s, want cert-a kept", c.pair.x509.Subject.CommonName, got)
		}
		if code := tlsGet(t, conn); code != 200 {
			t.Errorf("request after a rejected reload: %d", code)
		}
		conn.Close()
	}
	if strings.Contains(p.logs.String(), "TLS certificate replaced") {
		t.Errorf("a certificate outside its validity was put in force:\n%s", p.logs)
	}
}

// A TLS client that leaves while its upstream is silent is noticed like a
// plain one: the upstream request is closed long before first_token.
func TestTLSClientGoneWhileUpstreamSilent(t *testing.T) {
	t.Parallel()
	// An abrupt close (the process dies: FIN, nothing else) and a clean
	// one (close_notify, which is data on the socket, then FIN): both must
	// free the permit and close the upstream request while it is silent.
	for _, tc := range []struct {
		name  string
		close func(raw net.Conn, c *tls.Conn)
	}{
		{"abrupt", func(raw net.Conn, _ *tls.Conn) { raw.Close() }},
		{"close_notify", func(_ net.Conn, c *tls.Conn) { c.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tlsClientGoneWhileUpstreamSilent(t, tc.close)
		})
	}
}

func tlsClientGoneWhileUpstreamSilent(t *testing.T, closeClient func(raw net.Conn, c *tls.Conn)) {
	pair := newTestPair(t, "cert")
	dir := t.TempDir()
	writePairFiles(t, dir, pair.cert, pair.key)
	ended := make(chan struct{}, 1)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that net/http watches for the close
		<-r.Context().Done()               // silent until Sluice gives up on it
		ended <- struct{}{}
	})}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	p := startConfig(t, `listen: LISTEN
admin: { listen: "off" }
tls: { cert_file: `+filepath.Join(dir, "tls.crt")+`, key_file: `+filepath.Join(dir, "tls.key")+` }
providers:
  - name: fake
    upstream: http://`+ln.Addr().String()+`
    match: { path_prefix: /fake }
    timeouts: { first_token: 1m }
`, nil)
	roots := x509.NewCertPool()
	roots.AddCert(pair.x509)
	raw, err := net.Dial("tcp4", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "sluice.test"})
	if _, err := io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"stream\":true}"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the request reaches the upstream
	closeClient(raw, c)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("upstream request still open 10s after the TLS client left:\n%s", p.logs)
	}
}

// sluice_tls_certificate_expiry_timestamp_seconds is the expiry of the
// certificate served now: the one loaded at start, then the one a reload
// swapped in. Without tls it is absent.
func TestTLSCertificateExpiryMetric(t *testing.T) {
	t.Parallel()
	soon, later := time.Now().Add(36*time.Hour).Truncate(time.Second), time.Now().Add(90*24*time.Hour).Truncate(time.Second)
	a, b := newTestPairUntil(t, "cert-a", soon), newTestPairUntil(t, "cert-b", later)
	dir := t.TempDir()
	writePairFiles(t, dir, a.cert, a.key)
	up := sseUpstream(t, 2, time.Millisecond)
	admin := freeAddr(t)
	p := startConfig(t, `listen: LISTEN
admin: { listen: `+admin+` }
tls: { cert_file: `+filepath.Join(dir, "tls.crt")+`, key_file: `+filepath.Join(dir, "tls.key")+` }
providers:
  - name: fake
    upstream: `+up+`
    match: { path_prefix: /fake }
`, nil)
	const name = "sluice_tls_certificate_expiry_timestamp_seconds"
	if got, ok := scrapeGauge(t, "http://"+admin+"/metrics", name); !ok || got != float64(soon.Unix()) {
		t.Fatalf("%s = %v (present %v), want %d\n%s", name, got, ok, soon.Unix(), p.logs)
	}
	writePairFiles(t, dir, b.cert, b.key)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, "TLS certificate replaced")
	if got, _ := scrapeGauge(t, "http://"+admin+"/metrics", name); got != float64(later.Unix()) {
		t.Fatalf("after the reload %s = %v, want %d", name, got, later.Unix())
	}

	plainAdmin := freeAddr(t)
	startConfig(t, `listen: LISTEN
admin: { listen: `+plainAdmin+` }
providers:
  - name: fake
    upstream: `+up+`
    match: { path_prefix: /fake }
`, nil)
	if _, ok := scrapeGauge(t, "http://"+plainAdmin+"/metrics", name); ok {
		t.Errorf("%s exported without tls", name)
	}
}

// scrapeGauge reads an unlabelled sample from a Prometheus text page.
func scrapeGauge(t *testing.T, url, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}
