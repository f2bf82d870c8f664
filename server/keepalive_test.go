package server_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/connectivity"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// A client pinging faster than the keepalive policy (grpcopt: at most one
// ping per 10s) is sent away with GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
//
// The client is a bare HTTP/2 connection: grpc-go's own client raises any
// keepalive Time below 10s to 10s, so it cannot ping faster than the policy
// from outside the grpc module.
func TestKeepalivePolicySendsFastPingerAway(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 10*time.Second)

	conn, err := net.DialTimeout("tcp", n.node.GRPCAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	var wmu sync.Mutex
	write := func(f func() error) error {
		wmu.Lock()
		defer wmu.Unlock()
		return f()
	}
	if err := write(func() error { return fr.WriteSettings() }); err != nil {
		t.Fatal(err)
	}

	type goaway struct {
		code  http2.ErrCode
		debug string
	}
	got := make(chan goaway, 1)
	readErr := make(chan error, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				readErr <- err
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					write(func() error { return fr.WriteSettingsAck() })
				}
			case *http2.GoAwayFrame:
				got <- goaway{f.ErrCode, string(f.DebugData())}
				return
			}
		}
	}()

	var ga goaway
	pings := 0
wait:
	for pings < 50 {
		select {
		case ga = <-got:
			break wait
		case err := <-readErr:
			t.Fatalf("connection ended without GOAWAY after %d pings: %v", pings, err)
		case <-time.After(50 * time.Millisecond):
		}
		pings++
		if err := write(func() error { return fr.WritePing(false, [8]byte{byte(pings)}) }); err != nil {
			t.Fatalf("ping %d: %v", pings, err)
		}
	}
	if pings >= 50 {
		select {
		case ga = <-got:
		case <-time.After(2 * time.Second):
			t.Fatalf("no GOAWAY after %d pings 50ms apart", pings)
		}
	}
	if ga.code != http2.ErrCodeEnhanceYourCalm || ga.debug != "too_many_pings" {
		t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", ga.code, ga.debug)
	}
	if pings > 5 {
		t.Fatalf("sent away only after %d pings", pings)
	}

	// The node keeps serving other clients.
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("NextID on a well-behaved connection: %v", err)
	}
}

// A connection older than --grpc-max-connection-age is asked to go away
// (the client's channel leaves READY), and the client's next call connects
// anew and succeeds; the node's default (5 min) is not 0.
func TestMaxConnectionAgeRebalances(t *testing.T) {
	if core.DefaultConfig().GRPCMaxConnectionAge <= 0 {
		t.Fatal("no default connection age: long-lived clients would never rebalance")
	}
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.GRPCMaxConnectionAge = time.Second })
	waitServing(t, n.ids, "", 10*time.Second)
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatal(err)
	}
	if s := n.conn.GetState(); s != connectivity.Ready {
		t.Fatalf("channel %v after a call, want READY", s)
	}
	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !n.conn.WaitForStateChange(wait, connectivity.Ready) {
		t.Fatal("the connection is still READY 10 s past a 1 s max age")
	}
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("NextID after the node sent the connection away: %v", err)
	}
}
