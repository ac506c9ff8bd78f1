package proxy

import (
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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
)

// testPKI is a CA and a server certificate it signed for "localhost" and
// 127.0.0.1.
type testPKI struct {
	caFile string // PEM of the CA, for tls.ca_file
	cert   tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testPKI{caFile: caFile, cert: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}}
}

// newFakeUpstreamTLS is newFakeUpstream behind TLS with pki's certificate.
func newFakeUpstreamTLS(t *testing.T, pki *testPKI) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeUpstream{ln: ln, ended: make(chan struct{}, 1000), stop: make(chan struct{})}
	f.srv = &fasthttp.Server{Handler: f.handle, CloseOnShutdown: true, Logger: quietLogger{}}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pki.cert}, MinVersion: tls.VersionTLS12})
	go f.srv.Serve(tln) //nolint:errcheck
	t.Cleanup(func() {
		close(f.stop)
		_ = f.srv.Shutdown()
	})
	return f
}

// silentListener accepts TCP connections and never answers: a TLS peer
// that stalls the handshake.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// Defect 1: a TLS handshake that never completes is bounded by
// timeouts.connect and ends as upstream_unreachable with the permit freed,
// long before first_token.
func TestTLSHandshakeStallIsUnreachable(t *testing.T) {
	t.Parallel()
	addr := silentListener(t)
	s := startSluice(t, testConfig("https://"+addr, func(p *config.Provider) {
		p.Timeouts.Connect = 200 * time.Millisecond
		p.Timeouts.FirstToken = 20 * time.Second
		p.Timeouts.Total = 30 * time.Second
	}))
	c := httpClient()
	c.Timeout = 10 * time.Second
	resp := post(t, c, s.base+"/fake/v1/chat/completions", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get(HeaderError) != "upstream_unreachable" {
		t.Fatalf("status %d %q %s, want 502 upstream_unreachable", resp.StatusCode, resp.Header.Get(HeaderError), body)
	}
	if n := s.srv.limiters.Limiter("fake").Stats().Inflight; n != 0 {
		t.Fatalf("%d permits still held", n)
	}
}

// Upstream TLS is verified: against tls.ca_file when set (only that CA),
// for tls.server_name when set, else for the upstream's host.
func TestUpstreamTLSVerified(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	up := newFakeUpstreamTLS(t, pki)
	port := up.ln.Addr().(*net.TCPAddr).Port
	cases := []struct {
		name     string
		upstream string
		tls      config.UpstreamTLS
		want     int
	}{
		{"custom CA", "https://127.0.0.1:" + strconv.Itoa(port), config.UpstreamTLS{CAFile: pki.caFile}, 200},
		{"custom CA, server_name", "https://127.0.0.1:" + strconv.Itoa(port), config.UpstreamTLS{CAFile: pki.caFile, ServerName: "localhost"}, 200},
		{"system roots do not know the CA", "https://127.0.0.1:" + strconv.Itoa(port), config.UpstreamTLS{}, 502},
		{"server_name not in the certificate", "https://127.0.0.1:" + strconv.Itoa(port), config.UpstreamTLS{CAFile: pki.caFile, ServerName: "api.example.com"}, 502},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startSluice(t, testConfig(tc.upstream, func(p *config.Provider) { p.TLS = tc.tls }))
			resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"})
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%q) %s, want %d", resp.StatusCode, resp.Header.Get(HeaderError), body, tc.want)
			}
			if tc.want == 502 && !strings.Contains(resp.Header.Get(HeaderError), "upstream_unreachable") {
				t.Fatalf("error %q, want upstream_unreachable", resp.Header.Get(HeaderError))
			}
		})
	}
}
