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

// TestImpatientCallerKeepsSlowEndpoint: of two endpoints, the first
// answers in 40ms — slower than an impatient caller's share, well within
// the deadline the patient caller allows. A caller that starts waiting
// for the refill the patient one waits for, and gives up after 15ms,
// neither cuts that refill nor puts the endpoint down: every ID comes
// from the first endpoint, with no failover, round after round.
func TestImpatientCallerKeepsSlowEndpoint(t *testing.T) {
	slow, addrSlow := startService(t, 1<<40, nil)
	slow.SetDelay(40 * time.Millisecond)
	other, addrOther := startService(t, 2<<40, nil)
	const maxAge = 200 * time.Millisecond
	c := newClient(t, []string{addrSlow, addrOther}, WithMaxAge(maxAge))

	var impatientFailed int
	for round := range 5 {
		patient := make(chan error, 1)
		var id uint64
		go func() {
			var err error
			id, err = c.Next(ctxFor(t, 5*time.Second))
			patient <- err
		}()
		time.Sleep(5 * time.Millisecond) // the patient caller's refill is in flight
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Millisecond)
		_, err := c.Next(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			impatientFailed++
		}
		if err := <-patient; err != nil {
			t.Fatalf("round %d: patient caller: %v", round, err)
		}
		if !slow.Owns(id) {
			t.Fatalf("round %d: ID %d not from the slow endpoint: an impatient caller bounced the refill", round, id)
		}
		if until := c.endpointList()[0].downUntil.Load(); until != 0 {
			t.Fatalf("round %d: the slow endpoint was marked down by a caller's own deadline", round)
		}
		time.Sleep(maxAge + 20*time.Millisecond) // the buffer goes stale: the next round refills
	}
	if impatientFailed == 0 {
		t.Fatal("no impatient caller gave up: the test did not exercise it")
	}
	if st := c.Stats(); st.Failovers != 0 || other.Issued() != 0 {
		t.Fatalf("stats %+v, other endpoint issued %d: want no failover", st, other.Issued())
	}
}

// TestShedNodeAskedLess: a node that sheds every request with a RetryInfo
// of 200ms is asked at most about once per 200ms, however many callers
// call Next and NextN (beyond the batch, direct) meanwhile; they get
// OVERLOADED with the time left at once. Once it serves again, so does
// the client. The test logs the requests per second it sent.
func TestShedNodeAskedLess(t *testing.T) {
	ts, addr := startService(t, 1, nil)
	const retry = 200 * time.Millisecond
	ts.Shed(retry)
	c := newClient(t, []string{addr})

	const callers, run = 4, 1200 * time.Millisecond
	var calls, overloaded atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < run {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				var err error
				if i%2 == 0 {
					_, err = c.NextN(ctx, 5000)
				} else {
					_, err = c.Next(ctx)
				}
				cancel()
				calls.Add(1)
				if Reason(err) == firnv1.ErrorReason_OVERLOADED {
					overloaded.Add(1)
					if d, ok := RetryAfter(err); !ok || d <= 0 || d > retry {
						t.Errorf("RetryAfter(%v) = %v, %v; want at most %v", err, d, ok, retry)
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sent := len(ts.RangeCounts())
	t.Logf("%d calls in %v (%d OVERLOADED): %d requests to the shedding node, %.1f/s",
		calls.Load(), elapsed.Round(time.Millisecond), overloaded.Load(), sent, float64(sent)/elapsed.Seconds())
	if overloaded.Load() == 0 {
		t.Fatal("no call saw OVERLOADED")
	}
	// One request per RetryInfo window (the first round after it asks,
	// the others wait for its answer), and those sent before the node's
	// first answer: one per caller and the refill.
	if limit := int(elapsed/retry) + 1 + callers; sent > limit {
		t.Fatalf("%d requests to a node that asked for %v between them over %v; want at most %d", sent, retry, elapsed, limit)
	}
	ts.Serve()
	waitFor(t, 2*retry+time.Second, "the client to serve again", func() bool {
		_, err := c.NextN(ctxFor(t, time.Second), 5000)
		return err == nil
	})
}

// TestFreshnessBound: no ID is handed out later than MaxAge after the
// start of the RPC that fetched it — to the nanosecond, and also when the
// clock jumps ahead with no refill goroutine run in between (a process
// frozen by SIGSTOP or a paused VM, resumed: callers run first). The
// clock is the test's; MaxAge is a minute, so the refiller's timer never
// fires while the test runs.
func TestFreshnessBound(t *testing.T) {
	ts, addr := startService(t, 1, nil)
	clk := newFakeClock()
	const maxAge = time.Minute
	c := newClient(t, []string{addr}, WithClock(clk), WithMaxAge(maxAge))
	ctx := ctxFor(t, 10*time.Second)
	first, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch := uint64(lastCount(ts))
	if batch < 3 {
		t.Fatalf("first batch of %d", batch)
	}
	fromFirst := func(id uint64) bool { return id > first && id < first+batch }

	clk.Advance(maxAge) // exactly MaxAge after the RPC's start: still fresh
	if id, err := c.Next(ctx); err != nil || !fromFirst(id) {
		t.Fatalf("Next at MaxAge: %d, %v; want an ID of the first batch", id, err)
	}
	clk.Advance(time.Nanosecond) // a frozen process resumes past MaxAge
	id, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fromFirst(id) || id == first {
		t.Fatalf("Next handed out %d of the batch fetched MaxAge+1ns ago", id)
	}
	clk.Advance(maxAge + time.Nanosecond)
	runs, err := c.NextRange(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].First <= id {
		t.Fatalf("NextRange took %v from a batch fetched more than MaxAge ago (last ID %d)", runs, id)
	}
}

// TestFailedCallCountsDropped: IDs a NextN or NextRange took from the
// buffer before failing (no node to refill from) are never handed out,
// and Stats counts them dropped: every ID is handed out once or counted.
func TestFailedCallCountsDropped(t *testing.T) {
	for _, kind := range []string{"NextN", "NextRange"} {
		t.Run(kind, func(t *testing.T) {
			c, err := New([]string{"127.0.0.1:1"}, WithLogger(quiet), WithMaxAge(time.Hour), WithoutHealthCheck(),
				WithCallTimeout(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			preload(c, 5, 5)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if kind == "NextN" {
				_, err = c.NextN(ctx, 13)
			} else {
				_, err = c.NextRange(ctx, 13)
			}
			if err == nil {
				t.Fatalf("%s(13) with 5 IDs buffered and no node: no error", kind)
			}
			if got := c.Stats().Dropped; got != 5 {
				t.Fatalf("%s(13) failed (%v) after taking the 5 buffered IDs: Stats().Dropped = %d, want 5", kind, err, got)
			}
		})
	}
}

// rangeHook is a clienttest service that runs before(k) ahead of its k-th
// NextRange answer (k from 1).
type rangeHook struct {
	*clienttest.Service
	calls  atomic.Int64
	before func(k int64)
}

func (h *rangeHook) NextRange(ctx context.Context, req *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	if k := h.calls.Add(1); h.before != nil {
		h.before(k)
	}
	return h.Service.NextRange(ctx, req)
}

// TestFailedSplitFetchCountsDropped: NextN or NextRange(3000) from a node
// whose max_range is 1000 fetches in three RPCs, and the second is
// refused: the 1000 IDs of the first are never handed out, and Stats
// counts them dropped (every ID is handed out once or counted).
func TestFailedSplitFetchCountsDropped(t *testing.T) {
	for _, kind := range []string{"NextN", "NextRange"} {
		t.Run(kind, func(t *testing.T) {
			svc := clienttest.NewService(1)
			svc.SetMaxRange(1000)
			h := &rangeHook{Service: svc, before: func(k int64) {
				if k == 2 {
					svc.Refuse(firnv1.ErrorReason_LEASE_LOST, "test: lease lost", 0)
				}
			}}
			c := newClient(t, []string{serveIDs(t, h, nil)}, WithoutHealthCheck(), WithMaxAge(time.Hour))
			ctx := ctxFor(t, 5*time.Second)
			var err error
			if kind == "NextN" {
				_, err = c.NextN(ctx, 3000)
			} else {
				_, err = c.NextRange(ctx, 3000)
			}
			if Reason(err) != firnv1.ErrorReason_LEASE_LOST {
				t.Fatalf("%s(3000): %v, want the node's LEASE_LOST", kind, err)
			}
			st := c.Stats()
			if st.FetchedIDs != 1000 || st.Dropped != 1000 || st.Buffered != 0 {
				t.Fatalf("after the failed %s: fetched %d, dropped %d, buffered %d; want 1000, 1000, 0 (none handed out)",
					kind, st.FetchedIDs, st.Dropped, st.Buffered)
			}
		})
	}
}

// TestSplitCallKeepsFreshness: NextN and NextRange take the buffer's IDs
// first, then fetch the rest; when that fetch outlasts MaxAge, the IDs
// taken from the buffer went stale meanwhile: they are dropped (counted)
// and taken again, never handed out after their batch expired.
func TestSplitCallKeepsFreshness(t *testing.T) {
	for _, kind := range []string{"NextN", "NextRange"} {
		t.Run(kind, func(t *testing.T) {
			clk := newFakeClock()
			const maxAge = time.Minute
			svc := clienttest.NewService(1)
			h := &rangeHook{Service: svc}
			h.before = func(k int64) {
				if k == 2 { // the direct fetch: a slow node, or a paused process
					clk.Advance(2 * maxAge)
				}
			}
			c := newClient(t, []string{serveIDs(t, h, nil)}, WithoutHealthCheck(), WithClock(clk), WithMaxAge(maxAge))
			ctx := ctxFor(t, 5*time.Second)
			first, err := c.Next(ctx) // the first refill, at mono 0: expires at 1m
			if err != nil {
				t.Fatal(err)
			}
			batch := c.Stats().FetchedIDs
			var ids []uint64
			if kind == "NextN" {
				ids, err = c.NextN(ctx, 1000)
			} else {
				var runs []Run
				runs, err = c.NextRange(ctx, 1000)
				for _, r := range runs {
					ids = appendIDs(ids, r)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != 1000 {
				t.Fatalf("%s(1000): %d IDs", kind, len(ids))
			}
			for _, id := range ids {
				if id > first && id < first+batch {
					t.Fatalf("%s returned ID %d of the batch fetched at mono 0, after %v (MaxAge %v)", kind, id, 2*maxAge, maxAge)
				}
			}
			if st := c.Stats(); st.Dropped < batch-1 {
				t.Fatalf("the stale batch's %d IDs not counted dropped: %+v", batch-1, st)
			}
		})
	}
}

// TestHeldRefusalIsTheStandingOne: a Next whose deadline ends before the
// one endpoint, which asked the client to wait, is free again is refused
// at once with that endpoint's refusal and the time left — not with the
// error of an older failed refill (here a lease loss long since over; the
// wait was set by a shed a NextN met).
func TestHeldRefusalIsTheStandingOne(t *testing.T) {
	clk := newFakeClock()
	svc := clienttest.NewService(1)
	c := newClient(t, []string{serveIDs(t, svc, nil)}, WithoutHealthCheck(), WithClock(clk), WithMaxAge(time.Hour))

	// Long ago: a refill failed LEASE_LOST (no RetryInfo).
	svc.Refuse(firnv1.ErrorReason_LEASE_LOST, "test: old lease loss", 0)
	if _, err := c.Next(ctxFor(t, 2*time.Second)); Reason(err) != firnv1.ErrorReason_LEASE_LOST {
		t.Fatalf("the refused refill: %v", err)
	}
	// The node serves again; the buffer refills and is drained.
	svc.Serve()
	clk.Advance(time.Minute)
	forget(c)
	if _, err := c.Next(ctxFor(t, 2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if left := c.Stats().Buffered; left > 0 {
		if _, err := c.NextN(ctxFor(t, 2*time.Second), int(left)); err != nil {
			t.Fatal(err)
		}
	}
	// Now the node sheds, asking for 3 s, and a direct fetch meets it.
	svc.Shed(3 * time.Second)
	if _, err := c.NextN(ctxFor(t, 2*time.Second), 5000); Reason(err) != firnv1.ErrorReason_OVERLOADED {
		t.Fatalf("the shed NextN: %v", err)
	}
	start := time.Now()
	_, err := c.Next(ctxFor(t, time.Second))
	if Reason(err) != firnv1.ErrorReason_OVERLOADED {
		t.Fatalf("Next refused with %v (reason %v); the endpoint's standing refusal is OVERLOADED with RetryInfo 3s", err, Reason(err))
	}
	if d, ok := RetryAfter(err); !ok || d <= time.Second || d > 3*time.Second {
		t.Fatalf("RetryAfter %v %v, want the time left of the 3s asked", d, ok)
	}
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Fatalf("refused after %v, not at once", waited)
	}
}
