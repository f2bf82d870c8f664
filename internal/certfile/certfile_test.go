package certfile_test

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/firnid/firn/internal/certfile"
	"github.com/firnid/firn/internal/devpki"
)

func serial(t *testing.T, k *certfile.KeyPair) int64 {
	t.Helper()
	c, err := x509.ParseCertificate(k.Current().Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.Int64()
}

// A renewed pair is served from the next call on; a pair that does not
// load leaves the previous one in use, is reported once, and a good pair
// written after it is taken.
func TestKeyPairReloads(t *testing.T) {
	f, err := devpki.Write(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	k, err := certfile.Load(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reloads []error
	k.OnReload(func(err error) { mu.Lock(); reloads = append(reloads, err); mu.Unlock() })
	if s := serial(t, k); s != 2 {
		t.Fatalf("serial %d, want the first server certificate's 2", s)
	}
	if s := serial(t, k); s != 2 || len(reloads) != 0 {
		t.Fatalf("unchanged files: serial %d, %d reloads", s, len(reloads))
	}
	want, err := f.RenewServer()
	if err != nil {
		t.Fatal(err)
	}
	if s := serial(t, k); s != want {
		t.Fatalf("after a renewal: serial %d, want %d", s, want)
	}

	// A certificate that does not match the key (a half-done copy): the
	// renewed pair stays; the failure is reported once, not per call.
	other, err := devpki.Write(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(other.ServerCert)
	if err := os.WriteFile(f.ServerCert, append(b, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if s := serial(t, k); s != want {
			t.Fatalf("after a bad write: serial %d, want the previous %d", s, want)
		}
	}
	mu.Lock()
	if len(reloads) != 2 || reloads[0] != nil || reloads[1] == nil || !strings.Contains(reloads[1].Error(), "previous certificate stays") {
		t.Fatalf("reload reports %v: want one success, then one failure naming what stays", reloads)
	}
	mu.Unlock()

	want, err = f.RenewServer()
	if err != nil {
		t.Fatal(err)
	}
	if s := serial(t, k); s != want {
		t.Fatalf("after a good pair again: serial %d, want %d", s, want)
	}
	if _, err := certfile.Load(f.ServerCert, other.ServerKey); err == nil {
		t.Fatal("Load of a mismatched pair succeeded")
	}
}

// A CA bundle that changes is read again; one that holds no certificate
// leaves the previous pool in use.
func TestPoolReloads(t *testing.T) {
	a, err := devpki.Write(t.TempDir(), "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := devpki.Write(t.TempDir(), "b")
	if err != nil {
		t.Fatal(err)
	}
	p, err := certfile.LoadPool(a.CA)
	if err != nil {
		t.Fatal(err)
	}
	first := p.Current()
	if p.Current() != first {
		t.Fatal("an unchanged bundle was read again")
	}
	caA, _ := os.ReadFile(a.CA)
	caB, _ := os.ReadFile(b.CA)
	if err := os.WriteFile(a.CA, append(caA, caB...), 0o600); err != nil {
		t.Fatal(err)
	}
	second := p.Current()
	if second == first {
		t.Fatal("a changed bundle was not read again")
	}
	var failed error
	p.OnReload(func(err error) { failed = err })
	if err := os.WriteFile(a.CA, []byte("not a certificate, and longer than the bundle was not"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p.Current() != second || failed == nil {
		t.Fatalf("a bundle without a certificate replaced the pool (reload error %v)", failed)
	}
	if _, err := certfile.LoadPool(filepath.Join(t.TempDir(), "none.pem")); err == nil {
		t.Fatal("LoadPool of a missing file succeeded")
	}
}
