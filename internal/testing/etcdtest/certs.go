package etcdtest

import (
	"crypto/tls"
	"testing"

	"github.com/firnid/firn/internal/devpki"
)

// Certs is a throw-away CA with a server certificate for 127.0.0.1 and a
// client certificate, as PEM files in Dir.
type Certs struct{ devpki.Files }

// MakeCerts writes a fresh CA, server and client certificate.
func MakeCerts(t testing.TB, clientCN string) *Certs {
	t.Helper()
	f, err := devpki.Write(t.TempDir(), clientCN)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return &Certs{*f}
}

// ClientTLS is a client configuration trusting the CA, with the client
// certificate.
func (c *Certs) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := c.Files.ClientTLS(true)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return cfg
}

// ClientTLSAs is ClientTLS presenting another client certificate of the
// same CA, with common name cn.
func (c *Certs) ClientTLSAs(t testing.TB, cn string) *tls.Config {
	t.Helper()
	certFile, keyFile, err := c.Files.IssueClient(cn)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	cfg, err := c.Files.ClientTLS(false)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	return cfg
}
