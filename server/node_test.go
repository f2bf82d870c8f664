package server_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/datadir"
	"github.com/firnid/firn/server"
	"github.com/firnid/firn/server/core"
)

// Start refuses fault injection without the Offset clock before it binds
// anything: the addresses stay free.
func TestStartRefusalBindsNothing(t *testing.T) {
	addr := freeAddr(t)
	cfg, err := nodeConfig(faultInjection, func(c *core.Config) { c.GRPCAddr = addr })
	if err != nil {
		t.Fatal(err)
	}
	st, err := datadir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n, err := server.New(cfg, nil, st, clockguard.NewSystem(), "n")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); !errors.Is(err, core.ErrConfig) {
		t.Fatalf("Start without the Offset clock: %v, want ErrConfig", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the refused Start left %s bound: %v", addr, err)
	}
	l.Close()
}
