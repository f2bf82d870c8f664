package zookeeper_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/firnid/firn/internal/testing/coordtest"
)

// TestCloseLeavesNoGoroutines: Close stops the client, the watches behind
// Peers and every call given up on.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	before := goleak.IgnoreCurrent()
	c := cl.ConnectWith(t, sysClock, nil)
	n := coordtest.Node("leak")
	l := acquire(t, c, coordtest.Spec("leak", 2), n)
	reserve(t, l, 10, n)
	if _, err := c.Peers(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	reserve(t, l, 20, n)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !isDone(l) {
		t.Fatal("lease not done after Close")
	}
	goleak.VerifyNone(t, before)
}
