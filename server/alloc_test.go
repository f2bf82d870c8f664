package server_test

import (
	"context"
	"testing"
	"time"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// unaryAllocs is what one unary NextID allocates on the node's side of
// gRPC (its interceptor, the handler, the core): the response message.
// An allocation added to the path fails TestUnaryPathAllocations; one
// taken away lowers this bound.
const unaryAllocs = 1

// TestUnaryPathAllocations: the allocation guard of the unary path. It
// counts allocations, not time: a serving node's NextID, through the
// interceptor and handler the gRPC server calls, allocates unaryAllocs
// per call.
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
		t.Fatalf("a unary NextID allocates %.1f times on the node's side of gRPC, want at most %d (the response)", got, unaryAllocs)
	}
	t.Logf("a unary NextID allocates %.1f times (bound %d)", got, unaryAllocs)
}
