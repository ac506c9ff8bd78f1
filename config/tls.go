package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// TLS turns on TLS on the client listener. Both files or neither: with
// neither (the default) the listener speaks plain HTTP.
type TLS struct {
	// CertFile is the PEM certificate chain served to clients, leaf first.
	// A relative path is relative to Sluice's working directory.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of the leaf certificate.
	KeyFile string `yaml:"key_file"`
	// KeyPair is the pair read from CertFile and KeyFile and checked (both
	// readable, the key matching the certificate) when the file is loaded,
	// so a reload whose pair is bad is rejected as a whole; nil when TLS is
	// off. Hand-built configs set it with [NewKeyPair].
	KeyPair *KeyPair `yaml:"-" json:"-"`
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// KeyPair is a loaded certificate and its private key. It prints as the
// certificate's subject and expiry, never the key.
type KeyPair struct {
	cert tls.Certificate
}

// NewKeyPair wraps a certificate whose Leaf is set (or can be parsed from
// its first certificate).
func NewKeyPair(c tls.Certificate) (*KeyPair, error) {
	if c.Leaf == nil {
		if len(c.Certificate) == 0 {
			return nil, fmt.Errorf("no certificate")
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			return nil, err
		}
		c.Leaf = leaf
	}
	return &KeyPair{cert: c}, nil
}

// Certificate returns the pair for a tls.Config; nil for a nil KeyPair.
func (k *KeyPair) Certificate() *tls.Certificate {
	if k == nil {
		return nil
	}
	return &k.cert
}

// NotAfter is when the leaf certificate expires.
func (k *KeyPair) NotAfter() time.Time {
	if k == nil {
		return time.Time{}
	}
	return k.cert.Leaf.NotAfter
}

// String names the certificate: its subject, DNS names and expiry.
func (k *KeyPair) String() string {
	if k == nil {
		return "none"
	}
	l := k.cert.Leaf
	return fmt.Sprintf("%s [%s] until %s", l.Subject, strings.Join(l.DNSNames, " "), l.NotAfter.UTC().Format(time.RFC3339))
}

// GoString is String.
func (k *KeyPair) GoString() string { return k.String() }

// Format writes String whatever the verb, so no verb can show the key.
func (k *KeyPair) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// MarshalText returns String (used by encoding/json, YAML and others).
func (k *KeyPair) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// LogValue returns String for log/slog.
func (k *KeyPair) LogValue() slog.Value { return slog.StringValue(k.String()) }

// tls checks the tls block and, when loading, reads the pair.
func (v *validator) tls(t *TLS) {
	switch {
	case !t.Enabled():
		return
	case t.CertFile == "":
		v.add("tls.cert_file", "required with tls.key_file")
		return
	case t.KeyFile == "":
		v.add("tls.key_file", "required with tls.cert_file")
		return
	}
	if v.lookup == nil { // Validate: the pair must have been loaded
		if t.KeyPair == nil {
			v.add("tls", "KeyPair is nil: the certificate files were not loaded (use Load, Parse or NewKeyPair)")
		} else {
			v.validity(t.CertFile, t.KeyPair, time.Now())
		}
		return
	}
	certPEM, err := os.ReadFile(t.CertFile)
	if err != nil {
		v.add("tls.cert_file", "cannot read: %v", unwrapPath(err))
	}
	keyPEM, kerr := os.ReadFile(t.KeyFile)
	if kerr != nil {
		v.add("tls.key_file", "cannot read: %v", unwrapPath(kerr))
	}
	if err != nil || kerr != nil {
		return
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err == nil {
		t.KeyPair, err = NewKeyPair(pair)
	}
	if err != nil {
		// Go's messages name the input at fault ("... in certificate
		// input", "x509: ..." for the certificate; the key otherwise) and
		// never carry key material.
		field := "tls.key_file"
		if msg := err.Error(); strings.Contains(msg, "certificate input") || strings.HasPrefix(msg, "x509:") || msg == "no certificate" {
			field = "tls.cert_file"
		}
		v.add(field, "%s", strings.TrimPrefix(err.Error(), "tls: "))
		return
	}
	v.validity(t.CertFile, t.KeyPair, time.Now())
}

// validity refuses a leaf certificate that is not valid at now, expired or
// not yet valid: every client would fail its handshake, so a reload that
// brings one is rejected and the certificate in force keeps serving. The
// wall clock is the one that counts, as it is the clients' clock.
func (v *validator) validity(file string, kp *KeyPair, now time.Time) {
	l := kp.cert.Leaf
	from, until := l.NotBefore.UTC().Format(time.RFC3339), l.NotAfter.UTC().Format(time.RFC3339)
	switch {
	case now.After(l.NotAfter):
		v.add("tls.cert_file", "the certificate in %s expired at %s (valid from %s until %s)", file, until, from, until)
	case now.Before(l.NotBefore):
		v.add("tls.cert_file", "the certificate in %s is not valid before %s (valid from %s until %s)", file, from, from, until)
	}
}

// unwrapPath drops the "open FILE: " of a path error: the message is
// already about that file.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
