// Package certfile keeps TLS material read from PEM files current — a key
// pair (KeyPair) and a CA bundle (Pool). For a key pair: a
// handshake that needs the certificate first reads both files and, if
// either's contents changed, loads the pair from what it read. Contents,
// not modification times: a renewal written within the file system's
// timestamp resolution, at the same size, is still seen.
// A renewed certificate (cert-manager, an ACME client, an operator's copy)
// is served from the next handshake on, without a restart; connections
// already established keep the certificate they started with. A pair that
// does not load — a half-written file, a key that does not match — leaves
// the previous pair in use and is tried again at the next handshake.
package certfile

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
)

// KeyPair is a certificate and its key, read from files and reloaded when
// they change. Its methods are safe for concurrent use.
type KeyPair struct {
	certFile, keyFile string

	mu       sync.Mutex
	cert     *tls.Certificate
	stamps   [2]stamp
	failed   [2]stamp // the stamps of the last pair that did not load
	onReload func(error)
}

// stamp identifies one version of a file: a digest of its contents.
type stamp [sha256.Size]byte

func stampOf(b []byte) stamp { return sha256.Sum256(b) }

// Load reads the pair; it fails when the files do not hold one.
func Load(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile}
	certPEM, keyPEM, st, err := k.read()
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", certFile, keyFile, err)
	}
	k.cert, k.stamps = &cert, st
	return k, nil
}

// OnReload sets f to be called after each reload: with nil when a changed
// pair was loaded, with the error when it could not be (the old pair stays
// in use).
func (k *KeyPair) OnReload(f func(error)) {
	k.mu.Lock()
	k.onReload = f
	k.mu.Unlock()
}

// read returns both files' contents and their stamps.
func (k *KeyPair) read() (certPEM, keyPEM []byte, st [2]stamp, err error) {
	if certPEM, err = os.ReadFile(k.certFile); err != nil {
		return nil, nil, st, err
	}
	if keyPEM, err = os.ReadFile(k.keyFile); err != nil {
		return nil, nil, st, err
	}
	return certPEM, keyPEM, [2]stamp{stampOf(certPEM), stampOf(keyPEM)}, nil
}

// Current returns the pair, loading it again first if its files changed.
func (k *KeyPair) Current() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	certPEM, keyPEM, st, err := k.read()
	if err != nil || st == k.stamps || st == k.failed {
		return k.cert // unreadable now, unchanged, or known not to load
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		k.failed = st
		if k.onReload != nil {
			k.onReload(fmt.Errorf("%s, %s: %w (the previous certificate stays in use)", k.certFile, k.keyFile, err))
		}
		return k.cert
	}
	k.cert, k.stamps, k.failed = &cert, st, [2]stamp{}
	if k.onReload != nil {
		k.onReload(nil)
	}
	return k.cert
}

// GetCertificate is tls.Config.GetCertificate for a server.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Current(), nil
}

// GetClientCertificate is tls.Config.GetClientCertificate for a client.
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.Current(), nil
}

// Pool is a CA bundle read from a PEM file and read again when the file
// changes; a bundle that does not parse leaves the previous pool in use.
type Pool struct {
	file string

	mu       sync.Mutex
	pool     *x509.CertPool
	stamp    stamp
	failed   stamp
	onReload func(error)
}

// LoadPool reads the bundle; it fails when the file holds no certificate.
func LoadPool(file string) (*Pool, error) {
	p := &Pool{file: file}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool, err := parsePool(file, b)
	if err != nil {
		return nil, err
	}
	p.pool, p.stamp = pool, stampOf(b)
	return p, nil
}

func parsePool(file string, b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// OnReload is KeyPair.OnReload for the bundle.
func (p *Pool) OnReload(f func(error)) {
	p.mu.Lock()
	p.onReload = f
	p.mu.Unlock()
}

// Current returns the pool, reading the file again first if it changed.
func (p *Pool) Current() *x509.CertPool {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := os.ReadFile(p.file)
	if err != nil {
		return p.pool
	}
	st := stampOf(b)
	if st == p.stamp || st == p.failed {
		return p.pool
	}
	pool, err := parsePool(p.file, b)
	if err != nil {
		p.failed = st
		if p.onReload != nil {
			p.onReload(fmt.Errorf("%s: %w (the previous CA bundle stays in use)", p.file, err))
		}
		return p.pool
	}
	p.pool, p.stamp, p.failed = pool, st, stamp{}
	if p.onReload != nil {
		p.onReload(nil)
	}
	return p.pool
}
