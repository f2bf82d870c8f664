package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs is a throw-away CA with a server certificate for 127.0.0.1 and a
// client certificate, as PEM files in Dir.
type Certs struct {
	Dir                   string
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// MakeCerts writes a fresh CA, server and client certificate. The validity
// window is fixed around a far past start so that no clock read is needed.
func MakeCerts(t testing.TB, clientCN string) *Certs {
	t.Helper()
	dir := t.TempDir()
	c := &Certs{
		Dir: dir, CA: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	notBefore := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter := time.Date(2090, 1, 1, 0, 0, 0, 0, time.UTC)
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "firn test CA"},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("etcdtest: CA: %v", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	writePEM(t, c.CA, "CERTIFICATE", caDER)

	issue := func(serial int64, cn string, usage []x509.ExtKeyUsage, certPath, keyPath string) {
		k := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: notBefore, NotAfter: notAfter, ExtKeyUsage: usage,
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatalf("etcdtest: certificate %s: %v", cn, err)
		}
		writePEM(t, certPath, "CERTIFICATE", der)
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatalf("etcdtest: key %s: %v", cn, err)
		}
		writePEM(t, keyPath, "EC PRIVATE KEY", kb)
	}
	issue(2, "127.0.0.1", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, c.ServerCert, c.ServerKey)
	issue(3, clientCN, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, c.ClientCert, c.ClientKey)
	return c
}

// ClientTLS is a client configuration trusting the CA, with the client
// certificate.
func (c *Certs) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("etcdtest: key: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("etcdtest: writing %s: %v", path, err)
	}
}
