package client

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/client/clienttest"
	firnv1 "github.com/firnid/firn/client/firnv1"
)

// syncBuf is a log sink for a test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCloseDuringDirectCall: Close while NextN and NextRange wait on a
// node for IDs beyond the buffer ends them with ErrClosed, waits for them,
// and marks no endpoint down; calls after Close get ErrClosed.
func TestCloseDuringDirectCall(t *testing.T) {
	h, addr := startHung(t)
	logs := &syncBuf{}
	c, err := New([]string{addr}, WithLogger(slog.New(slog.NewTextHandler(logs, nil))), WithCallTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	errs := make(chan error, 3)
	go func() {
		_, err := c.NextN(ctx, 100_000)
		errs <- err
	}()
	go func() {
		_, err := c.NextRange(ctx, 1_000_000)
		errs <- err
	}()
	go func() {
		_, err := c.Decode(ctx, 1)
		errs <- err
	}()
	for h.calls.Load() < 2 { // both direct fetches are in flight
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed := time.Now()
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) && err != nil {
				t.Errorf("a call in flight during Close: %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a call in flight did not return after Close")
		}
	}
	if closed.Sub(start) > 5*time.Second {
		t.Errorf("Close took %v", closed.Sub(start))
	}
	if strings.Contains(logs.String(), "endpoint failed") {
		t.Errorf("Close marked an endpoint down:\n%s", logs)
	}
	if _, err := c.Info(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Info after Close: %v, want ErrClosed", err)
	}
	if _, err := c.NextRange(ctx, 10); !errors.Is(err, ErrClosed) {
		t.Errorf("NextRange after Close: %v, want ErrClosed", err)
	}
}

// lackingService is an IDService that does not run the client's
// generator: its ID calls and Decode answer NOT_FOUND, as a node a
// rollout adding the generator has not reached yet.
type lackingService struct {
	*testService
}

var errLacking = status.Error(codes.NotFound, `unknown generator "default" (this node runs other)`)

func (l *lackingService) NextID(context.Context, *firnv1.NextIDRequest) (*firnv1.NextIDResponse, error) {
	return nil, errLacking
}

func (l *lackingService) NextIDs(context.Context, *firnv1.NextIDsRequest) (*firnv1.NextIDsResponse, error) {
	return nil, errLacking
}

func (l *lackingService) NextRange(context.Context, *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	return nil, errLacking
}

func (l *lackingService) Decode(context.Context, *firnv1.DecodeRequest) (*firnv1.DecodeResponse, error) {
	return nil, errLacking
}

func startLacking(t *testing.T) string {
	t.Helper()
	l := &lackingService{testService: clienttest.NewService(1 << 50)}
	return serveIDs(t, l, l.Health())
}

// TestNotFoundTriesTheOthers: an endpoint that does not run the generator
// does not end the round: the IDs come from the next one, and that one
// stays first. When none runs it, the error is NOT_FOUND, not
// UNAVAILABLE.
func TestNotFoundTriesTheOthers(t *testing.T) {
	lacking := startLacking(t)
	ts, serving := startService(t, 1<<40, nil)
	c, err := New([]string{lacking, serving}, WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	for i := range 50 {
		id, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("Next %d: %v", i, err)
		}
		if !ts.Owns(id) {
			t.Fatalf("Next %d: %d is not the serving node's", i, id)
		}
	}
	if ids, err := c.NextN(ctx, 50_000); err != nil || len(ids) != 50_000 {
		t.Fatalf("NextN past the buffer: %d IDs, %v", len(ids), err)
	}
	if _, err := c.Decode(ctx, 1<<40); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if st := c.Stats(); st.Endpoint != serving {
		t.Fatalf("serving from %s, want %s", st.Endpoint, serving)
	}

	none, err := New([]string{lacking, startLacking(t)}, WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	_, err = none.NextN(ctx, 50_000)
	if status.Code(errors.Unwrap(err)) != codes.NotFound && !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("no endpoint runs the generator: %v, want NOT_FOUND", err)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Fatalf("no endpoint runs the generator: %v, want NOT_FOUND, not UNAVAILABLE", err)
	}
	if _, err := none.Decode(ctx, 1); errors.Is(err, ErrUnavailable) || err == nil {
		t.Fatalf("Decode where no endpoint runs the generator: %v, want NOT_FOUND", err)
	}
	if st := none.Stats(); st.CallErrors < 2 {
		t.Fatalf("Stats.CallErrors %d after a Decode failed on two endpoints", st.CallErrors)
	}
}

// countingHealth is a health service that answers UNIMPLEMENTED, as a
// server without one does, and counts the calls.
type countingHealth struct {
	healthpb.UnimplementedHealthServer
	checks, watches atomic.Int64
}

func (h *countingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.checks.Add(1)
	return nil, status.Error(codes.Unimplemented, "no health here")
}

func (h *countingHealth) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	h.watches.Add(1)
	return status.Error(codes.Unimplemented, "no health here")
}

// TestNoHealthServiceAskedOnce: an endpoint whose health service answers
// UNIMPLEMENTED is not asked again before every fetch.
func TestNoHealthServiceAskedOnce(t *testing.T) {
	h := &countingHealth{}
	addr := serveIDs(t, clienttest.NewService(1<<40), h)
	c, err := New([]string{addr}, WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxFor(t, 10*time.Second)
	for i := range 20 {
		if _, err := c.NextN(ctx, 50_000); err != nil { // beyond the buffer: a fetch each
			t.Fatalf("NextN %d: %v", i, err)
		}
	}
	if n := h.checks.Load(); n > 1 {
		t.Fatalf("%d health checks for 20 fetches from an endpoint without a health service; want at most 1", n)
	}
}
