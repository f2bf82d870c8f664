package clientnode

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/firnid/firn/client"
	"github.com/firnid/firn/client/clienttest"
	"github.com/firnid/firn/internal/devpki"
)

// The client over TLS and mTLS, with certificates loaded by LoadTLS, and
// refused (ErrUnavailable) without the client certificate or in plaintext.
func TestTLS(t *testing.T) {
	certs, err := devpki.Write(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	caOnly, err := client.LoadTLS(certs.CA, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	mtls, err := client.LoadTLS(certs.CA, certs.ClientCert, certs.ClientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	plain := clienttest.NewServer(1, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	t.Cleanup(plain.Close)
	mutual := clienttest.NewServer(1<<40, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12,
		ClientCAs: caOnly.RootCAs, ClientAuth: tls.RequireAndVerifyClientCert})
	t.Cleanup(mutual.Close)
	ctx := ctxFor(t, 20*time.Second)

	for _, tc := range []struct {
		name string
		addr string
		tls  *tls.Config
		ok   bool
	}{
		{"tls", plain.Addr, caOnly, true},
		{"mtls", mutual.Addr, mtls, true},
		{"mtls without client cert", mutual.Addr, caOnly, false},
		{"plaintext to tls", plain.Addr, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []client.Option{client.WithCallTimeout(2 * time.Second)}
			if tc.tls != nil {
				opts = append(opts, client.WithTLS(tc.tls))
			}
			c := newClient(t, []string{tc.addr}, opts...)
			_, err := c.Next(ctx)
			if tc.ok && err != nil {
				t.Fatalf("Next: %v", err)
			}
			if !tc.ok && !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("Next error %v, want ErrUnavailable", err)
			}
		})
	}
	if _, err := client.LoadTLS(certs.CA, certs.ClientCert, "", ""); !errors.Is(err, client.ErrInvalidOption) {
		t.Fatalf("LoadTLS with a cert and no key: %v", err)
	}
}
