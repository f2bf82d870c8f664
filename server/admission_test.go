package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// Admission: a generator asked for more than --max-queue's worth of IDs
// refuses the excess at once with RESOURCE_EXHAUSTED (ErrorInfo
// OVERLOADED, RetryInfo when the queue will have drained) rather than
// letting it wait, and so does a request whose deadline falls before its
// turn; HTTP answers 429 with Retry-After; the shed requests are counted.
// compact (64 IDs/s) makes the queue's time long enough to see.
func TestAdmissionRefusesAtOnce(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), generators("default=compact"),
		func(c *core.Config) { c.MaxQueue = 3 * time.Second })
	waitServing(t, n.ids, "", 10*time.Second)
	// compact: max batch 128 (64 per 1 s unit × 2 units of lead), queue
	// bound max(64 IDs/s × 3 s, 128) = 192.

	// Requests of 128 in a row, one after another until the checks are
	// done: once the buffered IDs and the lead are used up, each waits
	// about two seconds for its IDs, in the queue. Between two of them
	// the queue is briefly empty, and a check that lands there is
	// admitted (and the load's next request may then be refused): each
	// check below tries again when its request was admitted, and a node
	// that never refuses fails all its tries.
	load, stopLoad := context.WithCancel(context.Background())
	loadDone := make(chan error, 1)
	go func() {
		served := 0
		for load.Err() == nil {
			c, cancel := context.WithTimeout(load, 10*time.Second)
			_, err := n.ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 128})
			cancel()
			switch {
			case err == nil:
				served++
			case load.Err() != nil, status.Code(err) == codes.ResourceExhausted:
			default:
				loadDone <- err
				return
			}
		}
		if served == 0 {
			loadDone <- errors.New("none of its requests was served")
		}
		loadDone <- nil
	}()
	defer stopLoad()
	awaitQueued := func() {
		t.Helper()
		for start := time.Now(); value(t, scrape(t, n.httpc, n.base), "firn_queue_ids", map[string]string{"generator": "default"}) < 128; time.Sleep(10 * time.Millisecond) {
			if time.Since(start) > 5*time.Second {
				t.Fatal("the load's request never entered the queue")
			}
		}
	}
	// refused runs try with 128 IDs queued until it is not admitted.
	refused := func(what string, try func() (admitted bool)) {
		t.Helper()
		for range 5 {
			awaitQueued()
			if !try() {
				return
			}
			t.Logf("%s: admitted (the queue had drained before it came); again", what)
		}
		t.Fatalf("%s: admitted five times with 128 IDs queued", what)
	}

	// With 128 queued: 128 more would pass the bound, refused at once
	// (a request that waited would be served: the code tells them apart).
	var err error
	refused("NextIDs beyond the queue", func() bool {
		_, err = n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 128})
		return err == nil
	})
	wantCode(t, "NextIDs beyond the queue", err, codes.ResourceExhausted, "overloaded", "--max-queue 192")
	retry := wantInfo(t, "NextIDs beyond the queue", err, "OVERLOADED", map[string]string{"generator": "default", "limit_ids": "192"})
	if retry == nil || retry.GetRetryDelay().AsDuration() <= 0 || retry.GetRetryDelay().AsDuration() > 3*time.Second {
		t.Fatalf("RetryInfo %v: want when the queue drains (under 3 s)", retry)
	}
	// 16 more fit the bound, but the 128 ahead take two seconds and the
	// caller gives 300 ms: refused at once too (RESOURCE_EXHAUSTED naming
	// the deadline, where a wait would end DEADLINE_EXCEEDED, or be
	// served when the queue had drained).
	refused("NextIDs that cannot meet its deadline", func() bool {
		dctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = n.ids.NextIDs(dctx, &firnv1.NextIDsRequest{Count: 16})
		return err == nil || status.Code(err) == codes.DeadlineExceeded
	})
	wantCode(t, "NextIDs that cannot meet its deadline", err, codes.ResourceExhausted, "deadline")
	var h httpErr
	refused("HTTP beyond the queue", func() bool {
		resp, body := httpDo(t, n, "/v1/ids?count=128")
		if resp.StatusCode == 200 {
			return true
		}
		h = checkHTTP(t, "/v1/ids?count=128", resp, body, 429, "OVERLOADED", "overloaded")
		return false
	})
	if h.Error.RetryAfterMS <= 0 {
		t.Fatalf("HTTP 429 without retry_after_ms: %+v", h)
	}
	stopLoad()
	if err := <-loadDone; err != nil {
		t.Fatalf("the load: %v", err)
	}
	fams := scrape(t, n.httpc, n.base)
	if v := value(t, fams, "firn_requests_shed_total", map[string]string{"generator": "default", "reason": "queue_full"}); v < 2 {
		t.Errorf("firn_requests_shed_total{queue_full} = %v, want the gRPC and the HTTP refusals", v)
	}
	if v := value(t, fams, "firn_requests_shed_total", map[string]string{"generator": "default", "reason": "deadline"}); v != 1 {
		t.Errorf("firn_requests_shed_total{deadline} = %v, want 1", v)
	}
	shed := value(t, fams, "firn_requests_shed_total", map[string]string{"generator": "default", "reason": "queue_full"}) +
		value(t, fams, "firn_requests_shed_total", map[string]string{"generator": "default", "reason": "deadline"})
	if code, page := httpGet(t, n.httpc, n.base+"/"); code != 200 || !strings.Contains(page, fmt.Sprintf("limit 192); shed %v", shed)) {
		t.Errorf("the status page does not show the queue and the %v shed requests", shed)
	}
	// The node still serves.
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatalf("NextID after the refusals: %v", err)
	}
}

// Fair share: while two connections keep the generator's queue full with
// large batches, a caller on a third asking for single IDs is served in
// the next turns, not after the batches queued ahead of it (which take
// about two seconds here: 10,240 IDs/s, --max-queue 2s). Its IDs still
// come from the generator, not the ring, which the batches keep empty.
func TestFairShareServesSmallCallers(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(),
		generators("default=time=41,worker=10,seq=10,unit=100ms,epoch=2024-01-01T00:00:00Z"),
		func(c *core.Config) { c.MaxQueue = 2 * time.Second; c.RingSize = 128 })
	waitServing(t, n.ids, "", 10*time.Second)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for range 2 {
		ids := firnv1.NewIDServiceClient(dialGRPC(t, n.node.GRPCAddr(), insecure.NewCredentials()))
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					c, cancel := context.WithTimeout(ctx, 10*time.Second)
					ids.NextIDs(c, &firnv1.NextIDsRequest{Count: 2000})
					cancel()
				}
			}()
		}
	}
	for start := time.Now(); value(t, scrape(t, n.httpc, n.base), "firn_queue_ids", map[string]string{"generator": "default"}) < 10_000; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the batches never filled the queue")
		}
	}
	small := firnv1.NewIDServiceClient(dialGRPC(t, n.node.GRPCAddr(), insecure.NewCredentials()))
	for i := range 5 {
		queued := value(t, scrape(t, n.httpc, n.base), "firn_queue_ids", map[string]string{"generator": "default"})
		start := time.Now()
		_, err := small.NextID(context.Background(), &firnv1.NextIDRequest{})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("single ID %d: %v", i, err)
		}
		// Behind the queue it would take queued/10,240 s (about 2 s).
		if ahead := time.Duration(queued / 10_240 * float64(time.Second)); took > ahead/2 {
			t.Fatalf("single ID %d took %v with %v of IDs queued ahead: it waited behind the batches", i, took, ahead)
		}
	}
}

// --client-rate: each client (here, each connection) has its own bucket;
// past it a request is refused at once with RESOURCE_EXHAUSTED naming the
// bound, and a count above the burst is a bad request.
func TestClientRate(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.ClientRate = 10; c.ClientBurst = 100 })
	waitServing(t, n.ids, "", 10*time.Second)
	if _, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 100}); err != nil {
		t.Fatalf("the burst: %v", err)
	}
	_, err := n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 50})
	wantCode(t, "past --client-rate", err, codes.ResourceExhausted, "--client-rate 10")
	retry := wantInfo(t, "past --client-rate", err, "OVERLOADED", map[string]string{"bound": "client-rate", "limit_ids_per_second": "10", "burst_ids": "100"})
	if d := retry.GetRetryDelay().AsDuration(); d < 4*time.Second || d > 5*time.Second {
		t.Fatalf("RetryInfo %v: want about 5 s (50 IDs at 10/s)", d)
	}
	_, err = n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 101})
	wantCode(t, "above the burst", err, codes.InvalidArgument, "--client-burst 100")

	// Another connection is another client.
	other := firnv1.NewIDServiceClient(dialGRPC(t, n.node.GRPCAddr(), insecure.NewCredentials()))
	if _, err := other.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 100}); err != nil {
		t.Fatalf("another client's burst: %v", err)
	}
	if v := value(t, scrape(t, n.httpc, n.base), "firn_requests_shed_total", map[string]string{"generator": "default", "reason": "client_rate"}); v != 1 {
		t.Errorf("firn_requests_shed_total{client_rate} = %v, want 1", v)
	}
}

// Every size Info advertises is served on an idle node: NextRange between
// the queue bound (250 ms of output, 1,024,000 for snowflake) and
// max_range (a second of output) is admitted when nothing is queued ahead
// of it. Before, it was refused every time with a RetryInfo that never
// came true.
func TestRangeAboveQueueBoundServedWhenIdle(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 10*time.Second)
	info := n.genInfo(t, "default")
	limit := value(t, scrape(t, n.httpc, n.base), "firn_queue_limit_ids", map[string]string{"generator": "default"})
	if uint64(limit) >= info.GetMaxRange() {
		t.Fatalf("queue bound %v not below max_range %d: nothing to test", limit, info.GetMaxRange())
	}
	c := &caller{t: t, n: n}
	for _, k := range []uint64{uint64(limit) + 1, 1_100_000, 2_000_000, info.GetMaxRange()} {
		c.rangeIDs(k)
		time.Sleep(time.Second) // idle again: the lead is back
	}
	increasing(t, "one caller's ranges", c.seen)
}

// Under --workers auto a generator serving one worker sizes admission
// and the fair share's turn for that one, not for --max-workers: a
// small request does not wait behind a sixteen-worker turn, and the queue
// bound is 250 ms of what it really produces.
func TestAutoWorkersSizeAdmissionForTheServing(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.WorkersAuto = true })
	waitServing(t, n.ids, "", 10*time.Second)
	if ws := n.genInfo(t, "default").GetWorkers(); len(ws) != 1 {
		t.Fatalf("workers %v at start under auto, want 1", ws)
	}
	l, _ := generator.Preset("snowflake")
	want := l.Rate() * 0.25 // one worker, --max-queue 250ms
	if got := value(t, scrape(t, n.httpc, n.base), "firn_queue_limit_ids", map[string]string{"generator": "default"}); got != want {
		t.Fatalf("queue bound %v with one worker serving, want %v (one worker's 250 ms)", got, want)
	}
}
