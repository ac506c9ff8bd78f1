package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestByteSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want ByteSize
	}{
		{"0", 0}, {"1024", 1024}, {"1024B", 1024}, {"8MiB", 8 << 20}, {"8 MiB", 8 << 20},
		{"512KiB", 512 << 10}, {"1GiB", 1 << 30}, {"2TiB", 2 << 40}, {"10MB", 10e6}, {"1KB", 1000},
	} {
		got, err := ParseByteSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "1.5MiB", "8 megabytes", "8mib", "9999999TiB"} {
		if got, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", bad, got)
		}
	}
	for b, want := range map[ByteSize]string{0: "0B", 100: "100B", 8 * MiB: "8MiB", 1536 * KiB: "1536KiB", GiB: "1GiB", 1000: "1000B"} {
		if got := b.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
	}
}

// A size is written as bytes or with a unit; both decode to bytes.
func TestServerBlockParses(t *testing.T) {
	t.Parallel()
	yml := "server:\n  max_request_body: 1048576\n  max_buffered_bytes: 64MiB\n  write_timeout: 5s\n" +
		"providers:\n  - name: a\n    upstream: https://a.example.com\n    match: { path_prefix: /a }\n"
	cfg, err := ParseWithEnv("s.yaml", []byte(yml), lookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultServer()
	want.MaxRequestBody, want.MaxBufferedBytes, want.WriteTimeout = MiB, 64*MiB, 5*time.Second
	if cfg.Server != want {
		t.Fatalf("server = %+v, want %+v", cfg.Server, want)
	}
}

func TestServerBudgetCoversOneBody(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Server.MaxRequestBody, c.Server.MaxBufferedBytes = 64*MiB, 32*MiB
	err := c.Validate()
	if err == nil || err.Error() != "server.max_buffered_bytes: must be at least max_request_body (64MiB), got 32MiB" {
		t.Fatalf("Validate = %v", err)
	}
}

// writeCA writes a self-signed CA certificate as PEM into dir.
func writeCA(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUpstreamTLSCAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := writeCA(t, dir)
	notPEM := filepath.Join(dir, "key.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := validConfig()
	c.Providers[0].TLS = UpstreamTLS{CAFile: ca, ServerName: "10.0.0.1"}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid CA file: %v", err)
	}
	c.Providers[0].TLS.CAFile = notPEM
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "providers[0].tls.ca_file: \""+notPEM+"\" holds no PEM certificate") {
		t.Fatalf("Validate = %v", err)
	}
	if strings.Contains(err.Error(), "not a certificate") {
		t.Fatal("error echoes the file's content")
	}
}
