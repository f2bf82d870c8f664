package etcd_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
)

// blackhole accepts connections and never answers, as a frozen server.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestNewContextCancelled: a dial to a server that never answers ends
// when its context does, well before the dial timeout, so a background
// dialler (coordinator.NewLazy) can stop at once.
func TestNewContextCancelled(t *testing.T) {
	cfg := quietConfig([]string{"http://" + blackhole(t)}, "dial")
	cfg.DialTimeout = 20 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	c, err := etcd.NewContext(ctx, cfg)
	if err == nil {
		c.Close()
		t.Fatal("NewContext to a server that never answers succeeded")
	}
	if d := time.Since(start); d > 2*time.Second || !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("NewContext cancelled after 100ms returned after %v with %v; want ErrUnavailable at once", d, err)
	}
}
