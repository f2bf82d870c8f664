package server_test

import (
	"context"
	"testing"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// unaryAllocs is what one unary NextID allocates on the node's side of
// gRPC (the method's handler, counted, the service, the core): the
// request message the generated handler decodes into, and the response —
// what a server that only answers allocates too. An allocation added to
// the path fails TestUnaryPathAllocations; one taken away lowers this
// bound. (With the metrics in an interceptor, the handler allocated two
// more: the interceptor's call info and the closure around the service.)
const unaryAllocs = 2

// TestUnaryPathAllocations: the allocation guard of the unary path. It
// counts allocations, not time: a serving node's NextID, through the
// handler the gRPC server calls, allocates unaryAllocs per call.
func TestUnaryPathAllocations(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 15*time.Second)
	call := n.node.UnaryNextID("")
	ctx := context.Background()
	var last uint64
	got := testing.AllocsPerRun(2000, func() {
		resp, err := call(ctx)
		if err != nil {
			t.Fatalf("NextID: %v", err)
		}
		id := resp.(*firnv1.NextIDResponse).GetId()
		if id <= last {
			t.Fatalf("NextID: %d after %d", id, last)
		}
		last = id
	})
	if got > unaryAllocs {
		t.Fatalf("a unary NextID allocates %.1f times on the node's side of gRPC, want at most %d (the request and the response)", got, unaryAllocs)
	}
	t.Logf("a unary NextID allocates %.1f times (bound %d)", got, unaryAllocs)
}
