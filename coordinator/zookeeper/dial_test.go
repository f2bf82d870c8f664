package zookeeper_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
)

// TestNewContextCancelled: a dial to a server that never answers ends
// when its context does, well before the dial timeout, so a background
// dialler (coordinator.NewLazy) can stop at once.
func TestNewContextCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cfg := zookeeper.DefaultConfig()
	cfg.Servers, cfg.Clock, cfg.Cluster = []string{ln.Addr().String()}, sysClock, "dial"
	cfg.DialTimeout = 20 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	c, err := zookeeper.NewContext(ctx, cfg)
	if err == nil {
		c.Close()
		t.Fatal("NewContext to a server that never answers succeeded")
	}
	if d := time.Since(start); d > 2*time.Second || !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("NewContext cancelled after 100ms returned after %v with %v; want ErrUnavailable at once", d, err)
	}
}
