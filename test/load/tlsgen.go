package load

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
	"time"
)

// ephemeralPKI is a throwaway CA with a server certificate for 127.0.0.1
// and a client certificate, written to a directory, for the no-op server
// when the run uses TLS. The validity window is fixed (2000–2100): no
// clock is read, and the keys live only as long as the run.
type ephemeralPKI struct {
	dir                   string
	ca                    *x509.CertPool
	serverCert, serverKey string
	caFile                string
	client                tls.Certificate
	clientCert, clientKey string
}

func newEphemeralPKI() (*ephemeralPKI, error) {
	dir, err := os.MkdirTemp("", "firn-bench-tls-")
	if err != nil {
		return nil, err
	}
	p := &ephemeralPKI{dir: dir, ca: x509.NewCertPool()}
	if err := p.build(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func (p *ephemeralPKI) build() error {
	notBefore := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "firn bench ephemeral CA"},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	p.ca.AddCert(caCert)
	p.caFile = filepath.Join(p.dir, "ca.pem")
	if err := writePEM(p.caFile, "CERTIFICATE", caDER); err != nil {
		return err
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: notBefore, NotAfter: notAfter,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
	}
	certPEM, keyPEM, err := leaf("firn-noop", 2, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	p.serverCert, p.serverKey = filepath.Join(p.dir, "server.pem"), filepath.Join(p.dir, "server-key.pem")
	if err := os.WriteFile(p.serverCert, certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(p.serverKey, keyPEM, 0o600); err != nil {
		return err
	}
	certPEM, keyPEM, err = leaf("firn-bench", 3, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	p.clientCert, p.clientKey = filepath.Join(p.dir, "client.pem"), filepath.Join(p.dir, "client-key.pem")
	if err := os.WriteFile(p.clientCert, certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(p.clientKey, keyPEM, 0o600); err != nil {
		return err
	}
	p.client, err = tls.X509KeyPair(certPEM, keyPEM)
	return err
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// childArgs are the no-op server's TLS flags; mtls adds the client CA.
func (p *ephemeralPKI) childArgs(mtls bool) []string {
	args := []string{"--tls-cert", p.serverCert, "--tls-key", p.serverKey}
	if mtls {
		args = append(args, "--client-ca", p.caFile)
	}
	return args
}

// clientConfig is the load side's TLS config for the no-op server.
func (p *ephemeralPKI) clientConfig(mtls bool) *tls.Config {
	cfg := &tls.Config{RootCAs: p.ca, MinVersion: tls.VersionTLS12}
	if mtls {
		cfg.Certificates = []tls.Certificate{p.client}
	}
	return cfg
}

func (p *ephemeralPKI) remove() { os.RemoveAll(p.dir) }
