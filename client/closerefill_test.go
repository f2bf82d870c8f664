package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/firnid/firn/client/clienttest"
)

// TestCloseCountsARefillInFlight: a refill whose answer arrives as Close
// runs is never handed out; its IDs are counted dropped, as the buffered
// ones are (every ID fetched is handed out once or counted).
func TestCloseCountsARefillInFlight(t *testing.T) {
	svc := clienttest.NewService(1)
	var c *Client
	closed := make(chan error, 1)
	// The refill's NextRange succeeds; before its answer reaches the
	// client, Close begins (its context is cancelled).
	hook := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && method == "/firn.v1.IDService/NextRange" {
			go func() { closed <- c.Close() }()
			for !c.closing() {
				time.Sleep(time.Millisecond)
			}
		}
		return err
	}
	var err error
	c, err = New([]string{serveIDs(t, svc, nil)}, WithLogger(quiet), WithoutHealthCheck(), WithMaxAge(time.Hour),
		WithDialOptions(grpc.WithChainUnaryInterceptor(hook)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(ctxFor(t, 5*time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next during Close: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.FetchedIDs == 0 {
		t.Fatal("the refill fetched nothing")
	}
	if st.Dropped != st.FetchedIDs {
		t.Fatalf("after Close: fetched %d, handed out 0, dropped %d: %d IDs lost uncounted", st.FetchedIDs, st.Dropped, st.FetchedIDs-st.Dropped)
	}
}
