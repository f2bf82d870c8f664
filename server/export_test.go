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
// runs it past its transport — the method's handler, counted as the node
// registers it (the counts kept apart from the node's), then the service
// — with a decoder that only names the generator: what a call allocates
// there is the node's own (TestUnaryPathAllocations counts it).
func (n *Node) UnaryNextID(gen string) func(context.Context) (any, error) {
	svc := &idService{node: n}
	var handler grpc.MethodHandler
	for _, md := range newGRPCMetrics(n.metrics.grpc.now).counted(&firnv1.IDService_ServiceDesc).Methods {
		if md.MethodName == "NextID" {
			handler = md.Handler
		}
	}
	dec := func(v any) error {
		v.(*firnv1.NextIDRequest).Generator = gen
		return nil
	}
	return func(ctx context.Context) (any, error) { return handler(svc, ctx, dec, nil) }
}
