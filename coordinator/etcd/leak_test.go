package etcd_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// TestNoGoroutineLeak: a coordinator that acquired, reserved, watched
// peers and released leaves no goroutine behind once closed.
func TestNoGoroutineLeak(t *testing.T) {
	// A server in another process: only the client's goroutines live here.
	srv := etcdtest.StartCluster(t, 1)
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	for _, abandon := range []bool{false, true} {
		cfg := etcd.DefaultConfig()
		cfg.Endpoints, cfg.Clock, cfg.Cluster = srv.Endpoints(), clockguard.NewSystem(), "leak"
		c, err := etcd.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		n := coordtest.Node("leak")
		l, err := c.Acquire(ctx, coordtest.Spec("g", 4), n)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Reserve(ctx, 10, coordtest.Beat(n)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Peers(ctx); err != nil {
			t.Fatal(err)
		}
		if abandon {
			c.Abandon()
		} else {
			if err := l.Release(ctx, 10); err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
		cancel()
		goleak.VerifyNone(t, opts...)
	}
}
