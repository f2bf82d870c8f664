package main

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/firnid/firn/client"
	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/devpki"
)

// The node's certificate renewed under load: its files are replaced while
// callers take IDs over mTLS on established connections and new
// connections open every 50 ms. No call fails; new connections get the
// renewed certificate within a second; the established ones are not
// dropped; the node logs the reload.
func TestCertificateRotationUnderLoad(t *testing.T) {
	pki, err := devpki.Write(t.TempDir(), "caller")
	if err != nil {
		t.Fatal(err)
	}
	a := freeAddrs(t)
	p := serve(t, t.TempDir(), a, nil, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.CA)
	base, err := pki.ClientTLS(true)
	if err != nil {
		t.Fatal(err)
	}
	// dialAs makes one NextID over a new connection with tc.
	dialAs := func(tc *tls.Config) error {
		conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = firnv1.NewIDServiceClient(conn).NextID(ctx, &firnv1.NextIDRequest{})
		return err
	}
	// served returns the serial of the certificate the node presents to a
	// new connection, after one NextID on it.
	served := func() (int64, error) {
		var serial atomic.Int64
		tc := base.Clone()
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			serial.Store(cs.PeerCertificates[0].SerialNumber.Int64())
			return nil
		}
		err := dialAs(tc)
		return serial.Load(), err
	}
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if _, err := served(); err == nil {
			break
		} else if time.Since(start) > 30*time.Second {
			t.Fatalf("node not serving over mTLS within 30 s: %v", err)
		}
	}

	c, err := client.New([]string{a.grpc}, client.WithTLS(base), client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var taken atomic.Int64
	errs := make(chan error, 16)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Next(ctx); err != nil {
					errs <- err
					return
				}
				taken.Add(1)
			}
		}()
	}
	var mu sync.Mutex
	var serials []int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			s, err := served()
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			serials = append(serials, s)
			mu.Unlock()
		}
	}()

	// count is how many samples there are, and how many at the end of
	// them are serial s. Handshakes slow down under load: the test waits
	// for samples, not for a fixed time.
	count := func(s int64) (all, trailing int) {
		mu.Lock()
		defer mu.Unlock()
		for i := len(serials) - 1; i >= 0 && serials[i] == s; i-- {
			trailing++
		}
		return len(serials), trailing
	}
	waitSamples := func(s int64, n int) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, tr := count(s); tr >= n {
				return
			}
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("new-connection serials %v: want %d in a row of serial %d", serials, n, s)
			}
		}
	}
	waitSamples(2, 5) // load before the renewal
	renewed, err := pki.RenewServer()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		last := int64(0)
		if len(serials) > 0 {
			last = serials[len(serials)-1]
		}
		mu.Unlock()
		if last == renewed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new connections still get serial %d 3 s after the renewal to %d", last, renewed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitSamples(renewed, 5) // and load after it
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a call failed during the rotation: %v", err)
	}
	if taken.Load() < 1000 {
		t.Fatalf("only %d IDs taken under load", taken.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(serials) < 10 || serials[0] != 2 {
		t.Fatalf("new-connection serials %v: want several, the first the original 2", serials)
	}
	if !strings.Contains(p.stderr.String(), "TLS certificate reloaded") {
		t.Errorf("the node did not log the reload:\n%s", p.stderr)
	}
	// The client's own connection was never dropped: it still served
	// from its one endpoint without a failover.
	if st := c.Stats(); st.Failovers != 0 || st.FetchErrors != 0 {
		t.Errorf("client stats after the rotation: %+v, want no failover and no fetch error", st)
	}

	// The client CA rotates too: a bundle of the old and a new CA replaces
	// --tls-client-ca's file, and a caller with a certificate of the new
	// CA is let in on its next connection, without a restart.
	next, err := devpki.Write(t.TempDir(), "new-caller")
	if err != nil {
		t.Fatal(err)
	}
	newCaller := base.Clone()
	newCaller.Certificates = nil
	pair, err := tls.LoadX509KeyPair(next.ClientCert, next.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	newCaller.Certificates = []tls.Certificate{pair}
	if err := dialAs(newCaller); err == nil {
		t.Fatal("a certificate of a CA the node does not trust was let in")
	}
	oldCA, _ := os.ReadFile(pki.CA)
	newCA, _ := os.ReadFile(next.CA)
	if err := os.WriteFile(pki.CA+".new", append(oldCA, newCA...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(pki.CA+".new", pki.CA); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); dialAs(newCaller) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("a caller of the new CA is still refused 3 s after the bundle changed: %v", dialAs(newCaller))
		}
	}
	if err := dialAs(base); err != nil {
		t.Errorf("a caller of the old CA is refused after the bundle gained the new one: %v", err)
	}
	if !strings.Contains(p.stderr.String(), "TLS client CA reloaded") {
		t.Errorf("the node did not log the client CA reload")
	}
}
