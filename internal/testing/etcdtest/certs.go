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
