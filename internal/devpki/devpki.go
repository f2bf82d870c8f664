// Package devpki writes throw-away certificate authorities: a CA, a
// server certificate for 127.0.0.1 and localhost, and a client
// certificate, as PEM files in one directory. The tests use it for TLS
// against etcd and firn nodes, and `firn bench` for its TLS runs against
// the no-op server.
//
// Keys are fresh P-256 keys on each call and the validity window is fixed
// (2000–2100), so no clock is read. Hazard: nothing here is fit for
// production certificates.
package devpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files of one throw-away CA, in Dir.
type Files struct {
	Dir                   string
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string

	// The CA, for RenewServer.
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

var (
	notBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter  = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Write creates a CA, a server certificate (server and client auth, for
// 127.0.0.1 and localhost) and a client certificate with common name
// clientCN, as ca.pem, server.pem, server-key.pem, client.pem and
// client-key.pem in dir.
func Write(dir, clientCN string) (*Files, error) {
	f := &Files{
		Dir: dir, CA: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "firn throw-away CA"},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("devpki: CA: %w", err)
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	f.caCert, f.caKey, f.serial = caCert, caKey, 3
	if err := f.leaf(2, "127.0.0.1", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		f.ServerCert, f.ServerKey); err != nil {
		return nil, err
	}
	if err := f.leaf(3, clientCN, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, f.ClientCert, f.ClientKey); err != nil {
		return nil, err
	}
	return f, nil
}

// RenewServer issues a new server certificate and key from the same CA
// (the next serial number) and replaces the server files, each with one
// rename, as a certificate manager does. It returns the new serial.
func (f *Files) RenewServer() (int64, error) {
	f.serial++
	certTmp, keyTmp := f.ServerCert+".new", f.ServerKey+".new"
	if err := f.leaf(f.serial, "127.0.0.1", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		certTmp, keyTmp); err != nil {
		return 0, err
	}
	if err := os.Rename(keyTmp, f.ServerKey); err != nil {
		return 0, fmt.Errorf("devpki: %w", err)
	}
	if err := os.Rename(certTmp, f.ServerCert); err != nil {
		return 0, fmt.Errorf("devpki: %w", err)
	}
	return f.serial, nil
}

// IssueClient issues another client certificate of the CA, with common
// name cn, as client-<cn>.pem and client-<cn>-key.pem in Dir, and returns
// their paths.
func (f *Files) IssueClient(cn string) (cert, key string, err error) {
	f.serial++
	cert, key = filepath.Join(f.Dir, "client-"+cn+".pem"), filepath.Join(f.Dir, "client-"+cn+"-key.pem")
	return cert, key, f.leaf(f.serial, cn, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert, key)
}

// leaf writes a certificate for cn signed by the CA, and its key.
func (f *Files) leaf(serial int64, cn string, usage []x509.ExtKeyUsage, certPath, keyPath string) error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("devpki: key for %s: %w", cn, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter, ExtKeyUsage: usage,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.caCert, &k.PublicKey, f.caKey)
	if err != nil {
		return fmt.Errorf("devpki: certificate for %s: %w", cn, err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return fmt.Errorf("devpki: key for %s: %w", cn, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyPath, "EC PRIVATE KEY", kb)
}

// Roots is a pool holding the CA alone.
func (f *Files) Roots() (*x509.CertPool, error) {
	b, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("devpki: %s holds no certificate", f.CA)
	}
	return pool, nil
}

// ClientTLS is a client configuration trusting the CA; with clientCert it
// also presents the client certificate.
func (f *Files) ClientTLS(clientCert bool) (*tls.Config, error) {
	pool, err := f.Roots()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientCert {
		cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("devpki: %w", err)
	}
	return nil
}
