package client

import (
	"cmp"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/client/clienttest"
	firnv1 "github.com/firnid/firn/client/firnv1"
)

// checkRuns fails unless runs hold exactly n IDs, every one issued by s,
// as increasing runs that neither overlap nor touch (touching runs are
// merged).
func checkRuns(t *testing.T, s *testService, runs []Run, n uint64) {
	t.Helper()
	var sum uint64
	for i, r := range runs {
		if r.Count == 0 {
			t.Fatalf("run %d of %v is empty", i, runs)
		}
		if i > 0 {
			if p := runs[i-1]; r.First <= p.First+p.Count {
				t.Fatalf("run %d %+v does not start above run %d %+v", i, r, i-1, p)
			}
		}
		for id := r.First; id < r.First+r.Count; id++ {
			if !s.Owns(id) {
				t.Fatalf("ID %d of run %+v was never issued by the server", id, r)
			}
		}
		sum += r.Count
	}
	if sum != n {
		t.Fatalf("runs hold %d IDs, want %d", sum, n)
	}
}

// TestNextRange: NextRange returns exactly n IDs as increasing, disjoint
// runs, taken from the buffer for small n and fetched with NextRange,
// within the node's max_range, for large n; IDs never repeat across calls.
func TestNextRange(t *testing.T) {
	ts, addr := startService(t, 1<<40, nil)
	ts.SetRuns(4096, 1000) // the node's runs have gaps between them
	ts.SetMaxRange(300_000)
	c := newClient(t, []string{addr})
	ctx := ctxFor(t, 20*time.Second)

	var all []Run
	for _, n := range []uint64{1, 5, 16, 4095, 4097, 100_000, 1 << 20, 3} {
		runs, err := c.NextRange(ctx, n)
		if err != nil {
			t.Fatalf("NextRange(%d): %v", n, err)
		}
		checkRuns(t, ts, runs, n)
		all = append(all, runs...)
	}
	slices.SortFunc(all, func(a, b Run) int { return cmp.Compare(a.First, b.First) })
	for i := 1; i < len(all); i++ {
		if p := all[i-1]; all[i].First < p.First+p.Count {
			t.Fatalf("runs %+v and %+v of two calls overlap", p, all[i])
		}
	}
	if got := ts.Counts(); len(got) != 0 {
		t.Fatalf("NextIDs asked %v of a node that has NextRange", got)
	}
	if m := maxCount(ts); m > 300_000 || m < 100_000 {
		t.Fatalf("largest NextRange count %d: want a direct fetch up to the node's max_range 300,000", m)
	}
	for _, n := range []uint64{0, MaxNextRange + 1} {
		if _, err := c.NextRange(ctx, n); !errors.Is(err, ErrInvalidCount) {
			t.Fatalf("NextRange(%d) error %v, want ErrInvalidCount", n, err)
		}
	}
}

// TestRunBufferConcurrent: callers mixing Next, NextN and NextRange (each
// at most a batch, so all from the buffer) on a node with short runs get
// distinct IDs, all issued by the node, each caller's in increasing order.
func TestRunBufferConcurrent(t *testing.T) {
	for _, ids := range []bool{false, true} {
		t.Run(map[bool]string{false: "NextRange", true: "NextIDs"}[ids], func(t *testing.T) {
			ts, addr := startService(t, 1000, nil)
			ts.SetRuns(64, 7) // many run boundaries for takes to cross
			ts.HideRange(ids)
			c := newClient(t, []string{addr}, WithBatchBounds(DefaultMinBatch, 5000))
			ctx := ctxFor(t, 30*time.Second)
			const callers, each = 8, 20_000
			got := make([][]uint64, callers)
			errs := make(chan error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := rand.New(rand.NewPCG(uint64(i), 1))
					for len(got[i]) < each {
						switch k := 1 + rnd.IntN(DefaultMinBatch); rnd.IntN(3) {
						case 0:
							id, err := c.Next(ctx)
							if err != nil {
								errs <- err
								return
							}
							got[i] = append(got[i], id)
						case 1:
							ids, err := c.NextN(ctx, k)
							if err != nil {
								errs <- err
								return
							}
							got[i] = append(got[i], ids...)
						default:
							runs, err := c.NextRange(ctx, uint64(k))
							if err != nil {
								errs <- err
								return
							}
							for _, r := range runs {
								got[i] = appendIDs(got[i], r)
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for i, ids := range got {
				for j := 1; j < len(ids); j++ {
					if ids[j] <= ids[j-1] {
						t.Fatalf("caller %d: ID %d after %d (take %d): not increasing from one node", i, ids[j], ids[j-1], j)
					}
				}
			}
			all := slices.Concat(got...)
			checkDistinct(t, all)
			for _, id := range all {
				if !ts.Owns(id) {
					t.Fatalf("ID %d was never issued by the server", id)
				}
			}
			if n := len(asked(ts, !ids)); ids && n != 1 || !ids && n != 0 {
				t.Fatalf("the other RPC asked %d times", n)
			}
		})
	}
}

// TestRefillsBackOutOfOrder: two refills in flight to one node that come
// back in the other order are handed out in the node's order; a refill
// whose IDs are below those of one already handed out is dropped, unless
// it was fetched after that one arrived.
func TestRefillsBackOutOfOrder(t *testing.T) {
	// No server: the test delivers the refills itself.
	c := newClient(t, []string{"127.0.0.1:1"}, WithMaxAge(time.Hour), WithoutHealthCheck())
	ep := c.endpointList()[0]
	r := &refiller{}
	deliver := func(born uint64, runs ...Run) {
		c.deliver(r, fetchResult{fetched: fetched{runs: runs, ep: ep}, born: born, count: int64(countOf(runs))})
	}
	ctx := ctxFor(t, 5*time.Second)
	next := func() uint64 {
		t.Helper()
		id, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	// Three refills launched together; the node served them as 100s,
	// 200s, 300s; they arrive 200s, 300s, 100s.
	deliver(0, Run{200, 2}, Run{210, 2})
	deliver(0, Run{300, 2})
	if id := next(); id != 200 {
		t.Fatalf("first ID %d, want 200", id)
	}
	deliver(0, Run{100, 2}, Run{250, 1}) // 100s below 200: dropped; 250 sorts in
	var ids []uint64
	for range 6 {
		ids = append(ids, next())
	}
	if want := []uint64{201, 210, 211, 250, 300, 301}; !slices.Equal(ids, want) {
		t.Fatalf("IDs %v, want %v", ids, want)
	}
	if d := c.Stats().Dropped; d != 2 {
		t.Fatalf("dropped %d IDs, want the 2 behind", d)
	}

	// One launched after all those arrived, with lower IDs (the node
	// restarted lower), is served; one launched before it arrived, lower
	// still, is dropped.
	deliver(r.delivered, Run{50, 1})
	if id := next(); id != 50 {
		t.Fatalf("ID %d, want 50 from the refill fetched after the others arrived", id)
	}
	deliver(0, Run{40, 1})
	if st := c.Stats(); st.Buffered != 0 || st.Dropped != 3 {
		t.Fatalf("stats %+v: want the late refill below 50 dropped", st)
	}
}

// TestRangeFallback: a node without NextRange (UNIMPLEMENTED) is asked
// NextIDs instead, after one try that the client remembers for that
// endpoint alone; after rangeRetry it tries NextRange again, so a node
// upgraded in place is used with ranges.
func TestRangeFallback(t *testing.T) {
	old, addrOld := startService(t, 1<<40, nil)
	cur, addrCur := startService(t, 2<<40, nil)
	old.SetRuns(4096, 100)
	old.HideRange(true)
	clk := newFakeClock()
	c := newClient(t, []string{addrOld, addrCur}, WithClock(clk), WithoutHealthCheck())
	ctx := ctxFor(t, 20*time.Second)

	for range 2000 {
		id, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !old.Owns(id) {
			t.Fatalf("ID %d not from the old node", id)
		}
	}
	runs, err := c.NextRange(ctx, 50_000)
	if err != nil {
		t.Fatal(err)
	}
	checkRuns(t, old, runs, 50_000)
	if n := len(old.RangeCounts()); n != 1 {
		t.Fatalf("the old node was asked NextRange %d times, want once", n)
	}
	if len(old.Counts()) < 2 {
		t.Fatalf("the old node was asked NextIDs %v", old.Counts())
	}

	// The current node, reached by failover, is asked NextRange.
	down(old)
	runs, err = c.NextRange(ctx, 50_000)
	if err != nil {
		t.Fatal(err)
	}
	checkRuns(t, cur, runs, 50_000)
	if len(cur.RangeCounts()) == 0 || len(cur.Counts()) != 0 {
		t.Fatalf("the current node was asked NextRange %v, NextIDs %v", cur.RangeCounts(), cur.Counts())
	}

	// The old node, upgraded in place, gets NextRange after rangeRetry.
	old.Serve()
	old.HideRange(false)
	c.endpointList()[0].downUntil.Store(0)
	c.active.Store(c.endpointList()[0])
	ids := len(old.Counts())
	clk.Advance(rangeRetry)
	runs, err = c.NextRange(ctx, 50_000)
	if err != nil {
		t.Fatal(err)
	}
	checkRuns(t, old, runs, 50_000)
	if n := len(old.RangeCounts()); n < 2 || len(old.Counts()) != ids {
		t.Fatalf("after rangeRetry the old node was asked NextRange %d times, NextIDs %d more", n, len(old.Counts())-ids)
	}
}

// TestRangeErrors: NextRange's errors are those of NextN: a whole round
// refused (ErrUnavailable, the node's reason and RetryInfo), every node
// shedding (RESOURCE_EXHAUSTED OVERLOADED), a request the node refuses
// (INVALID_ARGUMENT, not failed over), the caller's context, and Close.
func TestRangeErrors(t *testing.T) {
	a, addrA := startService(t, 1<<40, nil)
	b, addrB := startService(t, 2<<40, nil)
	c := newClient(t, []string{addrA, addrB})
	ctx := ctxFor(t, 20*time.Second)

	down(a)
	down(b)
	// From the buffer's refill, which asks both nodes; then direct, which
	// asks neither: both said when to come back (RetryInfo), and the
	// error says how long is left of that.
	for i, n := range []uint64{1, 100_000} {
		asked := len(a.RangeCounts()) + len(b.RangeCounts())
		_, err := c.NextRange(ctx, n)
		if !errors.Is(err, ErrUnavailable) || status.Code(err) != codes.Unavailable {
			t.Fatalf("NextRange(%d) with every node down: %v, want ErrUnavailable", n, err)
		}
		if r := Reason(err); r != firnv1.ErrorReason_LEASE_LOST {
			t.Fatalf("Reason(%v) = %v, want LEASE_LOST", err, r)
		}
		d, ok := RetryAfter(err)
		sent := len(a.RangeCounts()) + len(b.RangeCounts()) - asked
		switch {
		case i == 0 && (!ok || d != 1500*time.Millisecond || sent != 2):
			t.Fatalf("RetryAfter(%v) = %v, %v after %d requests; want 1.5s after asking both nodes", err, d, ok, sent)
		case i == 1 && (!ok || d <= 0 || d >= 1500*time.Millisecond || sent != 0):
			t.Fatalf("RetryAfter(%v) = %v, %v after %d requests; want the time left of 1.5s, asking no node", err, d, ok, sent)
		}
	}

	a.Shed(time.Second)
	b.Shed(time.Second)
	forget(c)
	_, err := c.NextRange(ctx, 100_000)
	if Reason(err) != firnv1.ErrorReason_OVERLOADED || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("every node shedding: %v (reason %v), want RESOURCE_EXHAUSTED OVERLOADED", err, Reason(err))
	}

	// A node that refuses every count: the client halves down to 1, then
	// reports the node's INVALID_ARGUMENT without failing over.
	a.Serve()
	b.Serve()
	a.SetMaxRange(0)
	forget(c)
	c.active.Store(c.endpointList()[0])
	issuedB := b.Issued()
	_, err = c.NextRange(ctx, 100_000)
	var epErr *EndpointError
	if status.Code(err) != codes.InvalidArgument || !errors.As(err, &epErr) || epErr.Endpoint != addrA {
		t.Fatalf("NextRange of a node refusing every count: %v, want its INVALID_ARGUMENT", err)
	}
	if b.Issued() != issuedB {
		t.Fatal("an INVALID_ARGUMENT failed over")
	}

	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.NextRange(done, 100_000); !errors.Is(err, context.Canceled) {
		t.Fatalf("NextRange with a cancelled context: %v", err)
	}
	c.Close()
	for _, n := range []uint64{1, 100_000} {
		if _, err := c.NextRange(ctx, n); !errors.Is(err, ErrClosed) {
			t.Fatalf("NextRange(%d) after Close: %v, want ErrClosed", n, err)
		}
	}
}

// TestShedKeepsBound: a node that shed a request (OVERLOADED) is not
// taken to refuse the count: once it serves again, the client asks it
// for full batches, not for the halved count of a message too large.
func TestShedKeepsBound(t *testing.T) {
	ts, addr := startService(t, 1, nil)
	ts.Shed(10 * time.Millisecond)
	c := newClient(t, []string{addr})
	ctx := ctxFor(t, 10*time.Second)
	if _, err := c.NextRange(ctx, 1000); Reason(err) != firnv1.ErrorReason_OVERLOADED {
		t.Fatalf("NextRange while shedding: %v, want OVERLOADED", err)
	}
	ts.Serve()
	forget(c) // the node said to wait 10ms
	runs, err := c.NextRange(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	checkRuns(t, ts, runs, 1000)
	if b := c.endpointList()[0].maxRange.Load(); b >= 0 && b < 1000 {
		t.Fatalf("the endpoint's range bound fell to %d after a shed", b)
	}
	if last := lastCount(ts); last != 1000 {
		t.Fatalf("asked %d after the shed, want 1000", last)
	}
}

// fixedRangeService answers every NextRange with the runs set last.
type fixedRangeService struct {
	*testService
	runs atomic.Pointer[[]*firnv1.Run]
}

func (f *fixedRangeService) NextRange(context.Context, *firnv1.NextRangeRequest) (*firnv1.NextRangeResponse, error) {
	return &firnv1.NextRangeResponse{Runs: *f.runs.Load()}, nil
}

// TestNextRangeBadAnswers: the client takes no more than it asked of a
// node's runs, skips empty ones, and refuses runs that overlap, go down or
// wrap past the largest ID (INTERNAL), which would otherwise hand an ID
// out twice.
func TestNextRangeBadAnswers(t *testing.T) {
	f := &fixedRangeService{testService: clienttest.NewService(1)}
	addr := serveIDs(t, f, nil)
	c := newClient(t, []string{addr}, WithoutHealthCheck())
	ctx := ctxFor(t, 10*time.Second)

	const n = 100 // above the batch size: a direct fetch asks the node for n
	for _, tc := range []struct {
		name string
		runs []*firnv1.Run
		want []Run // nil: INTERNAL
	}{
		{"more than asked", []*firnv1.Run{{First: 1000, Count: 60}, {First: 2000, Count: 60}}, []Run{{1000, 60}, {2000, 40}}},
		{"empty run", []*firnv1.Run{{First: 5000, Count: 0}, {First: 6000, Count: n}}, []Run{{6000, n}}},
		{"out of order", []*firnv1.Run{{First: 9000, Count: 50}, {First: 8000, Count: 50}}, nil},
		{"overlapping", []*firnv1.Run{{First: 10000, Count: 50}, {First: 10049, Count: 50}}, nil},
		{"wrapping", []*firnv1.Run{{First: math.MaxUint64 - 10, Count: n}}, nil},
		{"none", nil, nil},
	} {
		f.runs.Store(&tc.runs)
		runs, err := c.NextRange(ctx, n)
		if tc.want == nil {
			if status.Code(err) != codes.Internal {
				t.Fatalf("%s: NextRange = %v, %v; want INTERNAL", tc.name, runs, err)
			}
			continue
		}
		if err != nil || !slices.Equal(runs, tc.want) {
			t.Fatalf("%s: NextRange = %v, %v; want %v", tc.name, runs, err, tc.want)
		}
	}
}
