package server_test

import (
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// Shutdown stops every goroutine the node started (the coordinator's
// connection closed too): only the in-process etcd's own remain.
func TestShutdownLeavesNoGoroutines(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	settle()
	base := goleak.IgnoreCurrent()
	n := startNode(t, e.Endpoints, t.TempDir(), generators("default=snowflake", "user=compact"),
		faultInjection)
	waitServing(t, n.ids, "default", 10*time.Second)
	if _, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 1000}); err != nil {
		t.Fatal(err)
	}
	httpGet(t, n.httpc, n.base+"/metrics")
	n.stop()
	n.httpc.CloseIdleConnections()
	if err := goleak.Find(base); err != nil {
		t.Fatal(err)
	}
}

// settle waits (bounded) until the goroutine count stops changing: the
// in-process etcd starts some of its goroutines after it reports ready.
func settle() {
	last, same := -1, 0
	for i := 0; i < 60 && same < 4; i++ {
		if n := runtime.NumGoroutine(); n == last {
			same++
		} else {
			last, same = n, 0
		}
		time.Sleep(50 * time.Millisecond)
	}
}
