package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePair writes a self-signed certificate for cn and its key as PEM
// files in dir and returns their paths.
func writePair(t *testing.T, dir, cn string) (certFile, keyFile string) {
	t.Helper()
	return writePairValid(t, dir, cn, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// writePairValid is writePair for a certificate valid from notBefore
// until notAfter.
func writePairValid(t *testing.T, dir, cn string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     []string{cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

const tlsProvider = "providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}}]\n"

// The tls block is checked when the file is loaded: both files, readable,
// PEM, the key matching the certificate; each problem on its key's line.
func TestTLSConfigValidated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certA, keyA := writePair(t, dir, "a.example")
	certB, keyB := writePair(t, dir, "b.example")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	block := func(cert, key string) string {
		s := "tls:\n"
		if cert != "" {
			s += "  cert_file: " + cert + "\n"
		}
		if key != "" {
			s += "  key_file: " + key + "\n"
		}
		return tlsProvider + s
	}
	for _, c := range []struct {
		name, data, want string
	}{
		{"good", block(certA, keyA), ""},
		{"no key", block(certA, ""), "t.yaml:2: tls.key_file: required with tls.cert_file"},
		{"no cert", block("", keyA), "t.yaml:2: tls.cert_file: required with tls.key_file"},
		{"missing cert", block(filepath.Join(dir, "nope.crt"), keyA), "t.yaml:3: tls.cert_file: cannot read: no such file or directory"},
		{"missing key", block(certA, filepath.Join(dir, "nope.key")), "t.yaml:4: tls.key_file: cannot read: no such file or directory"},
		{"mismatch", block(certA, keyB), "t.yaml:4: tls.key_file: private key does not match public key"},
		{"cert not pem", block(garbage, keyA), "t.yaml:3: tls.cert_file: failed to find any PEM data in certificate input"},
		{"key not pem", block(certB, garbage), "t.yaml:4: tls.key_file: failed to find any PEM data in key input"},
		{"key as cert", block(certA, certA), "t.yaml:4: tls.key_file: found a certificate rather than a key"},
	} {
		cfg, err := ParseWithEnv("t.yaml", []byte(c.data), lookupEnv)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			if got := cfg.TLS.KeyPair.String(); !strings.Contains(got, "CN=a.example") {
				t.Errorf("%s: KeyPair %s, want the a.example certificate", c.name, got)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// A listener certificate that has expired, or is not valid yet, is
// refused when the file is loaded (and so at a reload, which keeps the one
// in force): the error names the file and the validity dates.
func TestTLSCertificateOutsideValidityIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	day := 24 * time.Hour
	now := time.Now().Truncate(time.Second)
	expCert, expKey := writePairValid(t, dir, "expired.example", now.Add(-30*day), now.Add(-day))
	newCert, newKey := writePairValid(t, dir, "early.example", now.Add(day), now.Add(30*day))
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	for _, c := range []struct {
		name, cert, key, want string
	}{
		{"expired", expCert, expKey, "t.yaml:3: tls.cert_file: the certificate in " + expCert + " expired at " + stamp(now.Add(-day)) +
			" (valid from " + stamp(now.Add(-30*day)) + " until " + stamp(now.Add(-day)) + ")"},
		{"not yet valid", newCert, newKey, "t.yaml:3: tls.cert_file: the certificate in " + newCert + " is not valid before " + stamp(now.Add(day)) +
			" (valid from " + stamp(now.Add(day)) + " until " + stamp(now.Add(30*day)) + ")"},
	} {
		data := tlsProvider + "tls:\n  cert_file: " + c.cert + "\n  key_file: " + c.key + "\n"
		_, err := ParseWithEnv("t.yaml", []byte(data), lookupEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// A KeyPair prints as its certificate, never its private key.
func TestKeyPairNeverPrintsKey(t *testing.T) {
	t.Parallel()
	cert, key := writePair(t, t.TempDir(), "p.example")
	cfg, err := ParseWithEnv("t.yaml", []byte(tlsProvider+"tls: {cert_file: "+cert+", key_file: "+key+"}\n"), lookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cfg.TLS.KeyPair.Certificate().PrivateKey.(*ecdsa.PrivateKey).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	d := new(big.Int).SetBytes(raw).String() // how fmt would print the scalar
	j, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	outs := []string{string(j)}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%d"} {
		outs = append(outs, fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, cfg.TLS), fmt.Sprintf(verb, cfg.TLS.KeyPair))
	}
	for _, out := range outs {
		if strings.Contains(out, d) || strings.Contains(out, hex.EncodeToString(raw)) || strings.Contains(out, "PRIVATE") {
			t.Errorf("private key printed: %s", out)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate of a loaded config: %v", err)
	}
	cfg.TLS.KeyPair = nil
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "tls: KeyPair is nil") {
		t.Errorf("Validate without the pair: %v", err)
	}
}

// admin.token_env names a variable holding a token of at least 16
// printable characters; the token is never repeated in a message.
func TestAdminTokenEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"ADMIN_TOKEN": "TOPSECRET-0123456789abcdef",
		"SHORT":       "TOPSECRET",
		"NEWLINE":     "TOPSECRET-0123456789abcdef\n",
		"EMPTY":       "",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, c := range []struct{ env, want string }{
		{"ADMIN_TOKEN", ""},
		{"UNSET_TOKEN", "t.yaml:2: admin.token_env: environment variable UNSET_TOKEN is not set"},
		{"SHORT", "admin.token_env: environment variable SHORT holds 9 characters; an admin token needs at least 16"},
		{"EMPTY", "admin.token_env: environment variable EMPTY holds 0 characters"},
		{"NEWLINE", "admin.token_env: environment variable NEWLINE holds spaces, control or non-ASCII characters"},
		{"TOPSECRET-0123456789abcdef", "admin.token_env: must be the name of an environment variable"},
	} {
		data := tlsProvider + "admin: {token_env: " + c.env + "}\n"
		cfg, err := ParseWithEnv("t.yaml", []byte(data), lookup)
		if c.want == "" {
			if err != nil || string(cfg.Admin.Token) != env["ADMIN_TOKEN"] {
				t.Errorf("%s: %v", c.env, err)
			}
			if s := fmt.Sprintf("%+v", cfg.Admin); strings.Contains(s, "TOPSECRET") {
				t.Errorf("token printed: %s", s)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.env, err, c.want)
		} else if strings.Contains(err.Error(), "TOPSECRET") {
			t.Errorf("%s: token in message: %v", c.env, err)
		}
	}
}
