package client

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/firnid/firn/client/clienttest"
	firnv1 "github.com/firnid/firn/client/firnv1"
)

// hungService is an IDService whose health says SERVING and whose Info
// answers, but whose NextID, NextIDs and NextRange never answer: they
// block until their context ends.
type hungService struct {
	*testService
	calls atomic.Int64 // NextID(s) calls received
}

func (h *hungService) NextID(ctx context.Context, _ *firnv1.NextIDRequest) (*firnv1.NextIDResponse, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func (h *hungService) NextIDs(ctx context.Context, _ *firnv1.NextIDsRequest) (*firnv1.NextIDsResponse, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func (h *hungService) NextRange(ctx context.Context, _ *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// startHung serves a hungService on loopback until the test ends.
func startHung(t *testing.T) (*hungService, string) {
	t.Helper()
	h := &hungService{testService: clienttest.NewService(1 << 50)}
	return h, serveIDs(t, h, h.Health()) // SERVING
}

// TestHungEndpointFailsOver: of two endpoints, the first (the one the
// client starts on) says SERVING but never answers an ID call; the
// second serves. Callers use a deadline shorter than CallTimeout, so the
// hung endpoint's calls are always cut short by the caller first. Within
// the first caller's deadline the client must give up on the hung
// endpoint, mark it down and get the IDs from the healthy one; every
// later call is served by the healthy one.
func TestHungEndpointFailsOver(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		call     func(context.Context, *Client) ([]uint64, error)
	}{
		// NextN above the batch size fetches directly (the caller's own RPC).
		{"NextN", 500 * time.Millisecond, func(ctx context.Context, c *Client) ([]uint64, error) {
			return c.NextN(ctx, 5000)
		}},
		// Next waits for the refill goroutine's fetch (a shared RPC).
		{"Next", 300 * time.Millisecond, func(ctx context.Context, c *Client) ([]uint64, error) {
			id, err := c.Next(ctx)
			if err != nil {
				return nil, err
			}
			return []uint64{id}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hung, addrHung := startHung(t)
			good, addrGood := startService(t, 1<<40, nil)
			c := newClient(t, []string{addrHung, addrGood})
			if c.opts.callTimeout <= tc.deadline {
				t.Fatalf("CallTimeout %v: the test needs it above the caller's deadline %v", c.opts.callTimeout, tc.deadline)
			}

			const calls = 10
			var ok int
			var all []uint64
			for i := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
				start := time.Now()
				ids, err := tc.call(ctx, c)
				took := time.Since(start)
				cancel()
				if err != nil {
					t.Logf("call %d: %v after %v", i, err, took.Round(time.Millisecond))
					if i > 0 {
						t.Errorf("call %d failed after the first: %v", i, err)
					}
					continue
				}
				ok++
				for _, id := range ids {
					if !good.Owns(id) {
						t.Fatalf("call %d: ID %d not from the healthy endpoint", i, id)
					}
				}
				all = append(all, ids...)
			}
			if ok < calls-1 {
				t.Fatalf("%d of %d calls with a %v deadline succeeded while a healthy endpoint stood by; want at least %d",
					ok, calls, tc.deadline, calls-1)
			}
			checkDistinct(t, all)
			if hung.calls.Load() == 0 {
				t.Fatal("the hung endpoint was never asked: the test did not exercise it")
			}
			_, mono := c.clock.Now()
			if until := time.Duration(c.endpointList()[0].downUntil.Load()); until <= mono {
				t.Fatalf("hung endpoint not marked down (down until %v, now %v)", until, mono)
			}
			st := c.Stats()
			if st.Endpoint != addrGood {
				t.Fatalf("serving from %s, want the healthy %s", st.Endpoint, addrGood)
			}
			if st.Failovers == 0 {
				t.Fatalf("stats %+v: no failover counted", st)
			}
		})
	}
}

// idCalls are a direct fetch beyond the batch (NextN, the caller's own
// RPC) and a wait on the shared refill (Next), as the tests below make
// each.
var idCalls = []struct {
	name string
	call func(context.Context, *Client) ([]uint64, error)
}{
	{"NextN", func(ctx context.Context, c *Client) ([]uint64, error) { return c.NextN(ctx, 5000) }},
	{"Next", func(ctx context.Context, c *Client) ([]uint64, error) {
		id, err := c.Next(ctx)
		return []uint64{id}, err
	}},
}

// TestCancelledCallLeavesEndpointUp: a caller that cancels its call (a
// context without a deadline) while an endpoint legitimately takes its
// time does not put that endpoint down: the endpoint was sent
// CallTimeout, not the caller's patience. The next call is served by
// the same endpoint, with no failover.
func TestCancelledCallLeavesEndpointUp(t *testing.T) {
	for _, tc := range idCalls {
		t.Run(tc.name, func(t *testing.T) {
			slow, addrSlow := startService(t, 1<<40, nil)
			slow.SetDelay(150 * time.Millisecond)
			other, addrOther := startService(t, 2<<40, nil)
			c := newClient(t, []string{addrSlow, addrOther}, WithMaxAge(5*time.Second))

			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			if _, err := tc.call(ctx, c); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call: %v, want context.Canceled", err)
			}
			if until := c.endpointList()[0].downUntil.Load(); until != 0 {
				t.Fatalf("the slow endpoint was marked down (until %v) by a caller that cancelled", time.Duration(until))
			}
			ids, err := tc.call(ctxFor(t, 10*time.Second), c)
			if err != nil {
				t.Fatalf("call after the cancelled one: %v", err)
			}
			for _, id := range ids {
				if !slow.Owns(id) {
					t.Fatalf("ID %d not from the slow endpoint: the cancelled call bounced its traffic", id)
				}
			}
			if st := c.Stats(); st.Failovers != 0 || other.Issued() != 0 {
				t.Fatalf("stats %+v, other endpoint issued %d: want no failover", st, other.Issued())
			}
		})
	}
}

// TestHungEndpointMissesSentDeadline: a call with no deadline of its own
// sends the hung endpoint CallTimeout; the endpoint misses it, is put
// down, and the call fails over to the healthy endpoint. The next call
// does not ask the hung endpoint.
func TestHungEndpointMissesSentDeadline(t *testing.T) {
	for _, tc := range idCalls {
		t.Run(tc.name, func(t *testing.T) {
			hung, addrHung := startHung(t)
			good, addrGood := startService(t, 1<<40, nil)
			c := newClient(t, []string{addrHung, addrGood}, WithCallTimeout(200*time.Millisecond))
			for i := range 2 {
				asked := hung.calls.Load()
				ids, err := tc.call(context.Background(), c)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				for _, id := range ids {
					if !good.Owns(id) {
						t.Fatalf("call %d: ID %d not from the healthy endpoint", i, id)
					}
				}
				switch n := hung.calls.Load() - asked; {
				case i == 0 && n == 0:
					t.Fatal("the hung endpoint was never asked: the test did not exercise it")
				case i == 1 && n != 0:
					t.Fatalf("the call after the hung endpoint missed its deadline asked it again (%d calls)", n)
				}
			}
			_, mono := c.clock.Now()
			if until := time.Duration(c.endpointList()[0].downUntil.Load()); until <= mono {
				t.Fatalf("hung endpoint not marked down (down until %v, now %v)", until, mono)
			}
		})
	}
}

// TestShortDeadlineKeepsSharedRefill: with one endpoint (nothing to fail
// over to) that answers slowly, a caller whose deadline is shorter than
// the answer gives up alone: the refill it shared with a patient caller
// is not cut, and the patient caller gets its ID from it.
func TestShortDeadlineKeepsSharedRefill(t *testing.T) {
	ts, addr := startService(t, 1, nil)
	ts.SetDelay(200 * time.Millisecond)
	c := newClient(t, []string{addr}, WithMaxAge(2*time.Second)) // the answer must not be stale on arrival

	patient := make(chan error, 1)
	go func() {
		_, err := c.Next(ctxFor(t, 5*time.Second))
		patient <- err
	}()
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("short caller: %v, want its deadline", err)
	}
	if err := <-patient; err != nil {
		t.Fatalf("patient caller: %v", err)
	}
	if st := c.Stats(); st.FetchErrors != 0 {
		t.Fatalf("stats %+v: the shared refill failed", st)
	}
}

// TestSlowFirstAnswerWithinCallersDeadline: an endpoint whose first answer
// takes longer than CallTimeout (as a cold connection and TLS handshake on
// a loaded machine do) serves a caller whose deadline has room: until the
// endpoint has answered once, the round's last attempt is not bounded by
// CallTimeout. Once it has answered, an answer slower than CallTimeout
// fails the attempt as before.
func TestSlowFirstAnswerWithinCallersDeadline(t *testing.T) {
	for _, tc := range idCalls {
		t.Run(tc.name, func(t *testing.T) {
			ts, addr := startService(t, 1<<40, nil)
			ts.SetDelay(700 * time.Millisecond)
			c := newClient(t, []string{addr}, WithCallTimeout(300*time.Millisecond), WithMaxAge(5*time.Second))
			start := time.Now()
			if _, err := tc.call(ctxFor(t, 3*time.Second), c); err != nil {
				t.Fatalf("first call, %v after it began: %v (the endpoint's first answer takes 700ms, the caller allows 3s)", time.Since(start), err)
			}
			// Answered: the next fetch is bounded by CallTimeout again.
			_, err := c.NextN(ctxFor(t, 3*time.Second), 1<<20)
			if err == nil || !strings.Contains(err.Error(), "no answer within") {
				t.Fatalf("a 700ms answer after the first, CallTimeout 300ms: %v, want 'no answer within'", err)
			}
		})
	}
}
