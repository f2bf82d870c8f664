package client

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

// TestDirectFetchKeepsReasonAtDeadline: a NextRange fetched directly,
// whose node refused with its reason (a shed, OVERLOADED) as the caller's
// deadline passed, tells the caller that refusal, not a bare deadline:
// the answer is there, and it says why (as Info, Decode and the Java
// client do).
func TestDirectFetchKeepsReasonAtDeadline(t *testing.T) {
	ts, addr := startService(t, 1, nil)
	ts.Shed(10 * time.Millisecond)
	// The node's answer reaches the caller only after its deadline
	// passed (a slow network), deterministically: the interceptor holds
	// the answer until the attempt's context (the caller's deadline) ends.
	hook := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if method == "/firn.v1.IDService/NextRange" && Reason(err) == firnv1.ErrorReason_OVERLOADED {
			<-ctx.Done()
		}
		return err
	}
	c := newClient(t, []string{addr}, WithoutHealthCheck(), WithDialOptions(grpc.WithChainUnaryInterceptor(hook)))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.NextRange(ctx, 1000)
	if r := Reason(err); r != firnv1.ErrorReason_OVERLOADED {
		t.Fatalf("NextRange: %v (reason %v); want the node's refusal, OVERLOADED", err, r)
	}
}
