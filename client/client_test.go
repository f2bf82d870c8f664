package client

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newClient(t *testing.T, endpoints []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(endpoints, append([]Option{WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// forget has the client forget what the endpoints said before: no
// endpoint is down or asked the client to wait.
func forget(c *Client) {
	for _, ep := range c.endpointList() {
		ep.downUntil.Store(0)
		ep.retryUntil.Store(0)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// rangeOf names the test server whose range holds id.
func rangeOf(id uint64, servers map[string]*testService) string {
	for name, s := range servers {
		if s.Owns(id) {
			return name
		}
	}
	return "none"
}

func checkDistinct(t *testing.T, ids []uint64) {
	t.Helper()
	s := slices.Clone(ids)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			t.Fatalf("ID %d handed out twice (of %d)", s[i], len(s))
		}
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	cases := []struct {
		name      string
		endpoints []string
		opts      []Option
		want      string
	}{
		{"no endpoints", nil, nil, "endpoints: need at least 1"},
		{"empty endpoint", []string{""}, nil, "endpoints[0] is empty"},
		{"duplicate endpoint", []string{"127.0.0.1:1", "127.0.0.1:1"}, nil, "endpoints[1] \"127.0.0.1:1\" given twice"},
		{"max age too short", []string{"127.0.0.1:1"}, []Option{WithMaxAge(time.Millisecond)}, "MaxAge 1ms outside [8ms, 1h0m0s]"},
		{"window above half max age", []string{"127.0.0.1:1"}, []Option{WithBatchWindow(60 * time.Millisecond)}, "BatchWindow 60ms above half of MaxAge (50ms)"},
		{"window too short", []string{"127.0.0.1:1"}, []Option{WithBatchWindow(time.Microsecond)}, "BatchWindow 1µs below 100µs"},
		{"min batch zero", []string{"127.0.0.1:1"}, []Option{WithBatchBounds(0, 10)}, "min batch 0 below 1"},
		{"min above max", []string{"127.0.0.1:1"}, []Option{WithBatchBounds(20, 10)}, "min batch 20 above max batch 10"},
		{"max batch too large", []string{"127.0.0.1:1"}, []Option{WithBatchBounds(1, 2_000_000)}, "max batch 2000000 above 1000000"},
		{"call timeout too short", []string{"127.0.0.1:1"}, []Option{WithCallTimeout(time.Millisecond)}, "CallTimeout 1ms outside [10ms, 5m0s]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.endpoints, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("error %v does not wrap ErrInvalidOption", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestNextConcurrentDistinct(t *testing.T) {
	ts, addr := startService(t, 1000, nil)
	c := newClient(t, []string{addr})
	ctx := ctxFor(t, 20*time.Second)
	const callers, each = 8, 5000
	got := make([][]uint64, callers)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				id, err := c.Next(ctx)
				if err != nil {
					errs <- err
					return
				}
				got[i] = append(got[i], id)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all := slices.Concat(got...)
	if len(all) != callers*each {
		t.Fatalf("got %d IDs, want %d", len(all), callers*each)
	}
	checkDistinct(t, all)
	for _, id := range all {
		if !ts.Owns(id) {
			t.Fatalf("ID %d was never issued by the server", id)
		}
	}
	if st := c.Stats(); st.FetchedIDs < uint64(len(all)) || st.Fetches == 0 {
		t.Fatalf("stats %+v: fetched fewer IDs than were served", st)
	}
}

// TestNextN: against a node with NextRange and one without, NextN returns
// exactly n distinct IDs, learning the node's bound from INVALID_ARGUMENT
// when Info does not tell it.
func TestNextN(t *testing.T) {
	for _, ids := range []bool{false, true} {
		t.Run(map[bool]string{false: "NextRange", true: "NextIDs"}[ids], func(t *testing.T) {
			ts, addr := startService(t, 1, nil)
			ts.SetRuns(100, 28)
			ts.HideInfo(true) // the client learns the bound from INVALID_ARGUMENT
			ts.HideRange(ids)
			ts.SetMaxBatch(300)
			ts.SetMaxRange(300)
			c := newClient(t, []string{addr})
			ctx := ctxFor(t, 20*time.Second)

			var all []uint64
			for _, n := range []int{1, 5, 16, 40, 2000} {
				got, err := c.NextN(ctx, n)
				if err != nil {
					t.Fatalf("NextN(%d): %v", n, err)
				}
				if len(got) != n {
					t.Fatalf("NextN(%d) returned %d IDs", n, len(got))
				}
				all = append(all, got...)
			}
			checkDistinct(t, all)
			for _, id := range all {
				if !ts.Owns(id) {
					t.Fatalf("ID %d was never issued by the server", id)
				}
			}
			counts := asked(ts, ids)
			if m := slices.Max(counts); m <= 300 {
				t.Fatalf("largest count asked %d: the direct fetch never tried above the bound", m)
			}
			if last := counts[len(counts)-1]; last > 300 {
				t.Fatalf("last count asked %d: the client did not lower its batch under the bound 300", last)
			}
			// Against the old node, NextRange is tried once: the client
			// remembers the UNIMPLEMENTED.
			if other := asked(ts, !ids); len(other) != map[bool]int{false: 0, true: 1}[ids] {
				t.Fatalf("counts asked of the other RPC: %v", other)
			}
			for _, n := range []int{0, -1, MaxNextN + 1} {
				if _, err := c.NextN(ctx, n); !errors.Is(err, ErrInvalidCount) {
					t.Fatalf("NextN(%d) error %v, want ErrInvalidCount", n, err)
				}
			}
		})
	}
}

// TestNextNIncreasingAcrossFailover: NextN's IDs increase within the
// call also when they come from two nodes — what the buffer held from one,
// the rest fetched from the other after the first refused. Before, NextN
// returned them in the order it got them (the README said increasing,
// the client's doc did not).
func TestNextNIncreasingAcrossFailover(t *testing.T) {
	high, addrHigh := startService(t, 1<<40, nil)
	_, addrLow := startService(t, 1, nil)
	c := newClient(t, []string{addrHigh, addrLow}, WithMaxAge(time.Minute))
	ctx := ctxFor(t, 20*time.Second)
	if _, err := c.Next(ctx); err != nil { // the buffer fills from the first node
		t.Fatal(err)
	}
	high.Refuse(firnv1.ErrorReason_LEASE_LOST, "lease lost (clienttest)", 0)
	got, err := c.NextN(ctx, 20_000)
	if err != nil {
		t.Fatal(err)
	}
	checkDistinct(t, got)
	if !slices.IsSorted(got) {
		t.Fatalf("NextN across a failover returned IDs out of order (first %d, last %d)", got[0], got[len(got)-1])
	}
	if got[0] >= 1<<40 || got[len(got)-1] < 1<<40 {
		t.Fatalf("IDs %d..%d: want the buffer's from the first node and the rest from the second", got[0], got[len(got)-1])
	}
}

// TestFailoverKilledMidStream kills one of two server processes while
// callers take IDs: the callers see no error, and no ID repeats.
func TestFailoverKilledMidStream(t *testing.T) {
	const baseA, baseB = 1 << 40, 2 << 40
	a := startChild(t, baseA)
	b := startChild(t, baseB)
	c := newClient(t, []string{a.addr, b.addr}, WithMaxAge(time.Second), WithBatchWindow(5*time.Millisecond))
	ctx := ctxFor(t, 30*time.Second)

	const callers = 4
	var (
		mu     sync.Mutex
		all    []uint64
		killed bool
		after  int // IDs served after the kill
	)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				id, err := c.Next(ctx)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				all = append(all, id)
				if killed {
					after++
				}
				n, done := len(all), killed && after >= 50_000
				if n == 30_000 && !killed {
					a.kill(t)
					killed = true
				}
				mu.Unlock()
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a caller saw an error while the other endpoint served: %v", err)
	}
	checkDistinct(t, all)
	var fromA, fromB int
	for _, id := range all {
		switch {
		case id >= baseA && id < baseB:
			fromA++
		case id >= baseB && id < baseB+baseA:
			fromB++
		default:
			t.Fatalf("ID %d from neither server's range", id)
		}
	}
	if fromA == 0 || fromB == 0 {
		t.Fatalf("IDs from A %d, from B %d: want both", fromA, fromB)
	}
	if st := c.Stats(); st.Endpoint != b.addr {
		t.Fatalf("serving from %s after A died, want B %s", st.Endpoint, b.addr)
	}
}

// TestFailoverUnavailable: an endpoint that answers UNAVAILABLE is left
// for the next one without an error to the caller.
func TestFailoverUnavailable(t *testing.T) {
	a, addrA := startService(t, 1<<40, nil)
	b, addrB := startService(t, 2<<40, nil)
	servers := map[string]*testService{"A": a, "B": b}
	c := newClient(t, []string{addrA, addrB}, WithoutHealthCheck())
	ctx := ctxFor(t, 20*time.Second)

	id, err := c.Next(ctx)
	if err != nil || rangeOf(id, servers) != "A" {
		t.Fatalf("first ID %d (%s), %v: want one from A", id, rangeOf(id, servers), err)
	}
	down(a)
	var all []uint64
	for range 2000 {
		id, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("Next while B serves: %v", err)
		}
		all = append(all, id)
	}
	if got := rangeOf(all[len(all)-1], servers); got != "B" {
		t.Fatalf("last ID from %s, want B", got)
	}
	checkDistinct(t, all)
	if c.Stats().Failovers == 0 {
		t.Fatal("no failover counted")
	}
}

// TestAllUnavailable: with every endpoint down, Next fails with
// ErrUnavailable carrying the servers' reason and code.
func TestAllUnavailable(t *testing.T) {
	a, addrA := startService(t, 1<<40, nil)
	b, addrB := startService(t, 2<<40, nil)
	down(a)
	down(b)
	c := newClient(t, []string{addrA, addrB})
	ctx := ctxFor(t, 20*time.Second)
	_, err := c.Next(ctx)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Next error %v, want ErrUnavailable", err)
	}
	if code := status.Code(err); code != codes.Unavailable {
		t.Fatalf("code %v, want Unavailable", code)
	}
	if !strings.Contains(err.Error(), "test: not serving") {
		t.Fatalf("error %q lacks the server's reason", err)
	}
	if r := Reason(err); r != firnv1.ErrorReason_LEASE_LOST {
		t.Fatalf("Reason(%v) = %v, want LEASE_LOST", err, r)
	}
	if d, ok := RetryAfter(err); !ok || d != 1500*time.Millisecond {
		t.Fatalf("RetryAfter(%v) = %v, %v; want 1.5s", err, d, ok)
	}
	if r := Reason(context.DeadlineExceeded); r != firnv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		t.Fatalf("Reason of a plain error = %v, want unspecified", r)
	}
	if _, ok := RetryAfter(errors.New("x")); ok {
		t.Fatal("RetryAfter of a plain error reports a delay")
	}
	var epErr *EndpointError
	if !errors.As(err, &epErr) || (epErr.Endpoint != addrA && epErr.Endpoint != addrB) {
		t.Fatalf("error %v names no endpoint", err)
	}
	// Recovery: once one serves again, Next succeeds.
	b.Serve()
	waitFor(t, 10*time.Second, "Next to succeed after B came back", func() bool {
		_, err = c.Next(ctx)
		return err == nil
	})
}

// TestHealthAware: an endpoint whose health says NOT_SERVING is skipped
// even though it would answer; when health flips, the client follows.
func TestHealthAware(t *testing.T) {
	a, addrA := startService(t, 1<<40, nil)
	b, addrB := startService(t, 2<<40, nil)
	servers := map[string]*testService{"A": a, "B": b}
	a.SetHealth(false)
	c := newClient(t, []string{addrA, addrB})
	ctx := ctxFor(t, 20*time.Second)
	for range 500 {
		id, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := rangeOf(id, servers); got != "B" {
			t.Fatalf("ID %d from %s while A is NOT_SERVING", id, got)
		}
	}
	if a.Issued() != 0 {
		t.Fatalf("A issued %d IDs while NOT_SERVING", a.Issued())
	}

	a.SetHealth(true)
	b.SetHealth(false)
	down(b) // as a node does: health and calls agree
	var sawA bool
	for range 20_000 {
		id, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("Next while A serves: %v", err)
		}
		if rangeOf(id, servers) == "A" {
			sawA = true
			break
		}
	}
	if !sawA {
		t.Fatal("no ID from A after the health flip")
	}
}

func ptr[T any](v T) *T { return &v }

func TestClose(t *testing.T) {
	_, addr := startService(t, 1, nil)
	c, err := New([]string{addr}, WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 10*time.Second)
	if _, err := c.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	if _, err := c.NextN(ctx, 3); !errors.Is(err, ErrClosed) {
		t.Fatalf("NextN after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestNextWaitsForContext: with the only endpoint silent (it accepts TCP
// connections and never answers) and a long call timeout, Next returns
// when its context ends.
func TestNextWaitsForContext(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	c := newClient(t, []string{lis.Addr().String()}, WithCallTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next error %v, want the context's deadline", err)
	}
}

// fakeClock is a manual Clock; tests advance it.
type fakeClock struct {
	mu   sync.Mutex
	mono time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{} }

func (c *fakeClock) Now() (time.Time, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(c.mono), c.mono
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.mono += d
	c.mu.Unlock()
}

// waitFor polls cond every millisecond for up to d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-time.After(time.Millisecond):
		}
	}
}

// advance moves the fake clock by d, wakes the refiller and waits until
// it measured the rate over the step.
func advance(t *testing.T, c *Client, clk *fakeClock, d time.Duration) {
	t.Helper()
	m := c.stats.measures.Load()
	clk.Advance(d)
	c.kick()
	waitFor(t, 5*time.Second, "a rate measurement", func() bool { return c.stats.measures.Load() > m })
}

// TestStaleDropped: IDs older than MaxAge are dropped, never served.
func TestStaleDropped(t *testing.T) {
	ts, addr := startService(t, 1, nil)
	clk := newFakeClock()
	c := newClient(t, []string{addr}, WithClock(clk), WithMaxAge(80*time.Millisecond), WithBatchWindow(10*time.Millisecond))
	ctx := ctxFor(t, 10*time.Second)
	first, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	firstBatch := uint64(lastCount(ts))
	if firstBatch < 2 {
		t.Fatalf("first batch of %d", firstBatch)
	}
	// Still fresh: the next ID comes from the same batch.
	second, err := c.Next(ctx)
	if err != nil || second >= first+firstBatch {
		t.Fatalf("second ID %d (%v) not from the first batch [%d, %d)", second, err, first, first+firstBatch)
	}
	// Age the batch just past MaxAge: the next take sees it at once.
	clk.Advance(80*time.Millisecond + time.Nanosecond)
	third, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if third < first+firstBatch {
		t.Fatalf("ID %d from the stale batch [%d, %d) served", third, first, first+firstBatch)
	}
	if d := c.Stats().Dropped; d < firstBatch-2 {
		t.Fatalf("dropped %d IDs, want at least %d", d, firstBatch-2)
	}
}

// TestBatchSizing: batches grow under a demand above 1 M IDs/s and shrink
// to at most 64 when the caller stops. The demand is measured on the
// injected clock, so the test drives the rate it wants.
func TestBatchSizing(t *testing.T) {
	ts, addr := startService(t, 1, nil)
	clk := newFakeClock()
	c := newClient(t, []string{addr}, WithClock(clk), WithMaxAge(80*time.Millisecond), WithBatchWindow(10*time.Millisecond))
	ctx := ctxFor(t, 30*time.Second)

	// 20,000 IDs per 10 ms of clock time: 2 M IDs/s.
	for range 6 {
		for range 20_000 {
			if _, err := c.Next(ctx); err != nil {
				t.Fatal(err)
			}
		}
		advance(t, c, clk, 10*time.Millisecond)
	}
	st := c.Stats()
	if st.Rate < 1e6 {
		t.Fatalf("measured rate %.0f IDs/s, want at least 1 M", st.Rate)
	}
	if st.BatchSize < 10_000 {
		t.Fatalf("batch size %d under 2 M IDs/s, want at least 10,000", st.BatchSize)
	}
	if m := maxCount(ts); m < 10_000 {
		t.Fatalf("largest batch asked %d, want at least 10,000", m)
	}

	// Idle: the rate decays and the batch falls back to the minimum.
	for i := 0; c.Stats().BatchSize > 64 || c.Stats().Rate >= 100; i++ {
		if i == 200 {
			t.Fatalf("after %d idle ticks: %+v", i, c.Stats())
		}
		advance(t, c, clk, c.tickLen)
	}
	// After the idle stretch the buffer is stale; the next fetch is small.
	advance(t, c, clk, 2*time.Second)
	waitFor(t, 5*time.Second, "the stale buffer to drop", func() bool { return c.Stats().Buffered == 0 })
	if _, err := c.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if last := lastCount(ts); last > 64 {
		t.Fatalf("idle client asked for %d IDs, want at most 64", last)
	}
}

// A node that sheds load (RESOURCE_EXHAUSTED, OVERLOADED) is left for
// another at once, for as long as its RetryInfo says, and the client asks
// for smaller batches; callers see an error only when every node sheds,
// and then it says so.
func TestOverloadedEndpointFailsOver(t *testing.T) {
	a, addrA := startService(t, 1<<40, nil)
	b, addrB := startService(t, 2<<40, nil)
	a.Shed(2 * time.Second)
	c := newClient(t, []string{addrA, addrB})
	ctx := ctxFor(t, 20*time.Second)
	id, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("Next with one node shedding: %v", err)
	}
	if !b.Owns(id) {
		t.Fatalf("ID %d not from the node that serves", id)
	}
	ep := c.endpointList()[0]
	_, mono := c.clock.Now()
	if left := time.Duration(ep.downUntil.Load()) - mono; left < time.Second || left > 2*time.Second {
		t.Fatalf("the shedding node is put behind for %v, want its RetryInfo (2 s)", left)
	}
	if c.overloads.Load() == 0 {
		t.Fatal("the shed request did not shrink the batch size")
	}

	// Every node sheds: the error says OVERLOADED and when to retry.
	b.Shed(time.Second)
	for {
		_, err = c.Next(ctx)
		if err != nil {
			break
		}
	}
	if Reason(err) != firnv1.ErrorReason_OVERLOADED || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("every node shedding: %v (reason %v), want RESOURCE_EXHAUSTED OVERLOADED", err, Reason(err))
	}
	if d, ok := RetryAfter(err); !ok || d <= 0 {
		t.Fatalf("RetryAfter(%v) = %v, %v", err, d, ok)
	}
	a.Serve()
	b.Serve()
	waitFor(t, 10*time.Second, "Next to serve again", func() bool {
		_, err := c.Next(ctx)
		return err == nil
	})
}
