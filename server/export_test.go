package server

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// WriteHTTPError answers err as the HTTP API's handlers do; tests only.
func WriteHTTPError(w http.ResponseWriter, err error) { writeErr(w, err) }

// UnaryNextID returns one NextID call of generator gen as the gRPC server
// runs it past its transport — the node's interceptor, then the service's
// handler — with the request built once: what a call allocates there is
// the node's own (TestUnaryPathAllocations counts it).
func (n *Node) UnaryNextID(gen string) func(context.Context) (any, error) {
	svc := &idService{node: n}
	info := &grpc.UnaryServerInfo{Server: svc, FullMethod: firnv1.IDService_NextID_FullMethodName}
	req := &firnv1.NextIDRequest{Generator: gen}
	handler := func(ctx context.Context, req any) (any, error) { return svc.NextID(ctx, req.(*firnv1.NextIDRequest)) }
	return func(ctx context.Context) (any, error) { return n.metrics.grpc.unary(ctx, req, info, handler) }
}
