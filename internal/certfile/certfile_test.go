package certfile_test

import (
	"crypto/x509"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/firnid/firn/internal/certfile"
	"github.com/firnid/firn/internal/testpki"
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
	f, err := testpki.Write(t.TempDir(), "client")
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
	other, err := testpki.Write(t.TempDir(), "client")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(other.ServerCert)
	// A different size guarantees the change is seen whatever the clock's
	// modification-time resolution.
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

	time.Sleep(10 * time.Millisecond) // a later modification time for the good pair
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
