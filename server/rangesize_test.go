package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// A layout whose sequence lies above the node fields (sonyflake) has runs
// of one ID each: a NextRange of the max_range Info advertises must fit
// in one response (grpcopt.MaxSendMsgSize), else gRPC itself refuses it,
// RESOURCE_EXHAUSTED without firn's ErrorInfo, after the IDs were issued.
func TestNextRangeMaxRangeFitsResponse(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), generators("s=sonyflake"),
		func(c *core.Config) { c.MaxLead = 40 * time.Second })
	waitServing(t, n.ids, "s", 10*time.Second)
	maxRange := n.genInfo(t, "s").GetMaxRange()
	// The caller takes any size: what is measured is what the node sends.
	conn := dialGRPC(t, n.node.GRPCAddr(), insecure.NewCredentials(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	// 589,824 runs of one ID, built and sent under -race beside the rest
	// of the suite: the call gets a minute (ctx's 10 s ran out in one
	// fresh-clone run), since what is checked is the size, not the time.
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := firnv1.NewIDServiceClient(conn).NextRange(cctx, &firnv1.NextRangeRequest{Generator: "s", Count: maxRange})
	if err != nil {
		t.Fatalf("NextRange(%d), the max_range Info advertises, on an idle node: %v", maxRange, err)
	}
	var total uint64
	for _, r := range resp.GetRuns() {
		total += r.GetCount()
	}
	if total != maxRange {
		t.Fatalf("NextRange(%d) returned %d IDs", maxRange, total)
	}
}
