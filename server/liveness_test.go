package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/ntptest"
	"github.com/firnid/firn/server"
	"github.com/firnid/firn/server/core"
)

// The liveness rules (README, Guarantees; docs/clock-policy.md): ready means it
// serves, not serving means refused at once naming the cause, no wait
// outlives the clock reading it was sized from.

// shortCalls runs callers making NextIDs(1000) calls with a short deadline
// until stop; it counts outcomes by gRPC code.
type shortCalls struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	codes map[codes.Code]int
	ids   []uint64
	msgs  []string
	// answered counts every answer since the load started (reset or not).
	answered atomic.Int64
}

func startShortCalls(cli firnv1.IDServiceClient, callers int, deadline time.Duration) *shortCalls {
	s := &shortCalls{stop: make(chan struct{}), codes: map[codes.Code]int{}}
	for range callers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				select {
				case <-s.stop:
					return
				default:
				}
				c, cancel := context.WithTimeout(context.Background(), deadline)
				r, err := cli.NextIDs(c, &firnv1.NextIDsRequest{Count: 1000})
				cancel()
				s.answered.Add(1)
				s.mu.Lock()
				s.codes[status.Code(err)]++
				if err == nil {
					s.ids = append(s.ids, r.GetIds()...)
				} else if len(s.msgs) < 5 {
					s.msgs = append(s.msgs, err.Error())
				}
				s.mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return s
}

func (s *shortCalls) snapshot() (map[codes.Code]int, []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[codes.Code]int{}
	for k, v := range s.codes {
		m[k] = v
	}
	return m, append([]uint64(nil), s.ids...)
}

// await waits until n calls were answered since the load started (any
// code): a sleep in its place lets a slow machine start a fault before
// any call is in flight, and check nothing.
func (s *shortCalls) await(t *testing.T, n int) {
	t.Helper()
	awaitCalls(t, &s.answered, int64(n))
}

func (s *shortCalls) reset() {
	s.mu.Lock()
	s.codes, s.ids, s.msgs = map[codes.Code]int{}, nil, nil
	s.mu.Unlock()
}

func (s *shortCalls) finish() {
	close(s.stop)
	s.wg.Wait()
}

// waitReady polls /readyz until it answers want, and returns how long it
// took.
func waitReady(t *testing.T, n *tnode, want int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var code int
	var body string
	for time.Since(start) < within {
		code, body = httpGet(t, n.httpc, n.base+"/readyz")
		if code == want {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("/readyz %d not reached within %v: %d %s", want, within, code, body)
	return 0
}

// checkRealTime fails if an ID is stamped beyond max-lead of the clock.
func checkRealTime(t *testing.T, ids []uint64, slack time.Duration) {
	t.Helper()
	snow, _ := generator.Preset("snowflake")
	now := wallNow()
	for _, id := range ids {
		p, err := snow.Decode(id)
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Time.Sub(now); d > time.Second+slack {
			t.Fatalf("ID %d is stamped %v, %v ahead of the clock (beyond max-lead 1s)", id, p.Time, d)
		}
	}
}

// A forward step of +1h contradicted by NTP, under load, then corrected
// (issue: "a node wedged while /readyz said 200"): while stepped the node
// is not ready and refuses at once; after the correction it is ready within
// 5 s, at least 95 % of calls succeed, none runs to its deadline, the IDs
// carry the real time, and SIGTERM drains in seconds. With a minute between
// NTP checks too: a step either way asks NTP at once (before, the node came
// back only at the next --ntp-interval).
func TestForwardStepHeldByNTPThenCorrected(t *testing.T) {
	for _, interval := range []string{"1s", "1m"} {
		t.Run("ntp-interval="+interval, func(t *testing.T) { forwardStepHeldByNTP(t, interval) })
	}
}

func forwardStepHeldByNTP(t *testing.T, interval string) {
	every, err := time.ParseDuration(interval)
	if err != nil {
		t.Fatal(err)
	}
	e := etcdtest.StartEmbedded(t)
	ntp := ntptest.NewServer(t)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection, ntpServers(every, ntp.Addr()))
	waitServing(t, n.ids, "", 10*time.Second)
	load := startShortCalls(n.ids, 4, time.Second)
	defer load.finish()
	load.await(t, 8)

	n.setOffset(t, time.Hour)
	waitReady(t, n, 503, 3*time.Second)
	_, body := httpGet(t, n.httpc, n.base+"/readyz")
	if !strings.Contains(body, "NTP offset") && !strings.Contains(body, "stepped forward") {
		t.Fatalf("/readyz during the step does not name it: %s", body)
	}
	time.Sleep(2 * time.Second)
	// The step stands until after the call: a node that waited instead of
	// refusing at once would run it to its deadline (DEADLINE_EXCEEDED).
	stepped, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err = n.ids.NextIDs(stepped, &firnv1.NextIDsRequest{Count: 1000})
	cancel()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a call during the step: %v; want UNAVAILABLE at once", err)
	}

	n.setOffset(t, 0)
	took := waitReady(t, n, 200, 5*time.Second)
	t.Logf("/readyz 200 %v after the correction", took)
	load.reset()
	time.Sleep(3 * time.Second)
	got, ids := load.snapshot()
	total := 0
	for _, v := range got {
		total += v
	}
	if got[codes.DeadlineExceeded] > 0 {
		t.Fatalf("after the correction %d of %d calls ran to their deadline (%v; %v)", got[codes.DeadlineExceeded], total, got, load.msgs)
	}
	if total == 0 || float64(got[codes.OK]) < 0.95*float64(total) {
		t.Fatalf("after the correction only %d of %d calls succeeded (%v; %v)", got[codes.OK], total, got, load.msgs)
	}
	checkRealTime(t, ids, 100*time.Millisecond)

	load.finish()
	load.stop = make(chan struct{}) // finish again at defer: harmless
	stopped := time.Now()
	n.stop()
	if d := time.Since(stopped); d > 5*time.Second {
		t.Fatalf("drain took %v", d)
	}
}

// NTP configured but unreachable and not required, +1h: the node is not
// ready (the step is unconfirmed and NTP cannot confirm it) and refuses at
// once; the clock coming back ends it. Before, /readyz stayed 200 while
// every call ran to its deadline, also after the correction.
func TestForwardStepWithUnreachableNTPNotRequired(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	ntp := ntptest.NewServer(t)
	ntp.SetSilent(true)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection, ntpServers(time.Second, ntp.Addr()),
		func(c *core.Config) { c.NTPRequired = false })
	waitServing(t, n.ids, "", 10*time.Second)
	load := startShortCalls(n.ids, 2, time.Second)
	defer load.finish()
	load.await(t, 4)

	n.setOffset(t, time.Hour)
	waitReady(t, n, 503, 2*time.Second)
	load.reset()
	time.Sleep(3 * time.Second)
	got, ids := load.snapshot()
	if got[codes.DeadlineExceeded] > 0 || got[codes.Unavailable] == 0 {
		t.Fatalf("during the step: %v (%v); want refusals at once, none at the deadline", got, load.msgs)
	}
	checkRealTime(t, ids, 100*time.Millisecond)
	_, body := httpGet(t, n.httpc, n.base+"/readyz")
	if !strings.Contains(body, "stepped forward") {
		t.Fatalf("/readyz does not name the step: %s", body)
	}

	n.setOffset(t, 0)
	waitReady(t, n, 200, 5*time.Second)
	load.reset()
	time.Sleep(2 * time.Second)
	got, ids = load.snapshot()
	if got[codes.DeadlineExceeded] > 0 || got[codes.OK] == 0 {
		t.Fatalf("after the correction: %v (%v)", got, load.msgs)
	}
	checkRealTime(t, ids, 100*time.Millisecond)
}

// Three nodes, no NTP, +1h on one: the peer check must not let the stepped
// node issue an ID stamped with the step (before, it did for about 2 s,
// clearing the gate on the first over-limit reading and on heartbeats from
// before the step), and after the correction it serves real time within
// 5 s (before, it stayed out for an hour).
func TestForwardStepAmongPeers(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	a := startNode(t, e.Endpoints, t.TempDir(), faultInjection)
	b := startNamedNode(t, "b", e.Endpoints, t.TempDir())
	c := startNamedNode(t, "c", e.Endpoints, t.TempDir())
	for _, x := range []*tnode{a, b, c} {
		waitServing(t, x.ids, "", 10*time.Second)
	}
	// Heartbeats flow once a second: every node must count the other two
	// in its peer check before the step.
	for _, x := range []*tnode{a, b, c} {
		for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
			resp, err := x.ids.Info(ctx(t), &firnv1.InfoRequest{})
			if err != nil {
				t.Fatalf("Info: %v", err)
			}
			if strings.Contains(resp.GetClockCheck(), "3 live nodes") {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("a node never counted three live nodes: clock check %q", resp.GetClockCheck())
			}
		}
	}
	load := startShortCalls(a.ids, 3, time.Second)
	defer load.finish()
	load.await(t, 6)

	a.setOffset(t, time.Hour)
	waitReady(t, a, 503, time.Second)
	load.reset()
	time.Sleep(4 * time.Second)
	got, ids := load.snapshot()
	checkRealTime(t, ids, 100*time.Millisecond)
	if got[codes.DeadlineExceeded] > 0 {
		t.Fatalf("during the step %d calls ran to their deadline (%v)", got[codes.DeadlineExceeded], load.msgs)
	}
	if code, body := httpGet(t, a.httpc, a.base+"/readyz"); code != 503 {
		t.Fatalf("the stepped node is ready: %s", body)
	}

	a.setOffset(t, 0)
	waitReady(t, a, 200, 5*time.Second)
	load.reset()
	time.Sleep(2 * time.Second)
	got, ids = load.snapshot()
	if got[codes.DeadlineExceeded] > 0 || got[codes.OK] == 0 {
		t.Fatalf("after the correction: %v (%v)", got, load.msgs)
	}
	checkRealTime(t, ids, 100*time.Millisecond)
}

// A coordinator frozen under load: the node stops serving before its
// reservation runs out, so no call waits on a reservation that cannot come
// (before, it said ready for about 0.2 s after the reservation ran out), and
// serves again once the coordinator is back.
func TestCoordinatorFreezeRefusesBeforeExpiry(t *testing.T) {
	procs := etcdtest.StartCluster(t, 1)
	n := startNode(t, procs.Endpoints(), t.TempDir(), func(c *core.Config) { c.Timing.LeaseTTL, c.Timing.ReservationWindow = 10*time.Second, 4*time.Second })
	waitServing(t, n.ids, "", 10*time.Second)
	load := startShortCalls(n.ids, 3, 500*time.Millisecond)
	defer load.finish()
	load.await(t, 6)
	until := n.genInfo(t, "").GetReservedUntil().AsTime()

	procs.Members[0].Freeze(t)
	thawed := false
	defer func() {
		if !thawed {
			procs.Members[0].Thaw(t)
		}
	}()
	load.reset()
	// Watch readiness through the freeze; the reservation seen last runs
	// out at the latest 4 s from now.
	deadline := time.Now().Add(7 * time.Second)
	var wentDown time.Time
	for time.Now().Before(deadline) {
		info := infoOf(t, n.ids, "")
		if r := info.GetReservedUntil(); r != nil && r.AsTime().After(until) {
			until = r.AsTime()
		}
		if !info.GetServing() {
			wentDown = wallNow()
			if !strings.Contains(info.GetReason(), "reservation") {
				t.Fatalf("not serving for another reason: %q", info.GetReason())
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if wentDown.IsZero() {
		t.Fatal("still serving 7 s into the freeze")
	}
	// Refused naming the reservation, with RetryInfo: the node serves
	// again no sooner than its next write (a call sooner is refused).
	_, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
	if ri := wantInfo(t, "NextID with the reservation run out", err, "RESERVATION_EXHAUSTED", nil); ri == nil || ri.GetRetryDelay().AsDuration() < 100*time.Millisecond {
		t.Fatalf("NextID with the reservation run out: RetryInfo %v, want the write's retry cadence (200ms)", ri)
	}
	// When the node left serving is what its own log says (the poll above
	// only sees it a moment later, and later still on a busy machine).
	if at, ok := transitionAt(n.logs.String(), "from=serving to=not-serving source=reservation"); ok {
		wentDown = at
	}
	if wentDown.After(until) {
		t.Fatalf("stopped serving at %v, after the reservation ran out at %v", wentDown, until)
	}
	time.Sleep(time.Second)
	got, _ := load.snapshot()
	if got[codes.DeadlineExceeded] > 0 {
		t.Fatalf("during the freeze %d calls ran to their deadline (%v; %v)", got[codes.DeadlineExceeded], got, load.msgs)
	}
	if got[codes.Unavailable] == 0 {
		t.Fatalf("no call refused during the freeze (%v): the check saw none", got)
	}
	procs.Members[0].Thaw(t)
	thawed = true
	waitServing(t, n.ids, "", 15*time.Second)
}

// stallJournal is a data-dir journal whose writes fail for the first
// failFirst calls and, once stall is set, block until released.
type stallJournal struct {
	inner     coordinator.Journal
	failFirst atomic.Int64
	stall     atomic.Bool
	release   chan struct{}
}

func (s *stallJournal) BeforeReserve(slot coordinator.Slot, until int64) error {
	if s.failFirst.Add(-1) >= 0 {
		return errors.New("injected data-dir failure")
	}
	if s.stall.Load() {
		<-s.release
	}
	return s.inner.BeforeReserve(slot, until)
}

func (s *stallJournal) Acked(slot coordinator.Slot, r int64) { s.inner.Acked(slot, r) }

// A failed first reservation keeps the generator out, naming the cause,
// and is retried on the 200 ms cadence (before, the node said ready and
// retried after a second); a data dir that stalls later takes the node out
// before its reservation runs out (before, the holder's loop stalled in
// the fsync while /readyz said 200), and SIGTERM is not held by it.
func TestJournalFailuresKeepTheNodeOut(t *testing.T) {
	j := &stallJournal{release: make(chan struct{})}
	j.failFirst.Store(4)
	wrap := server.WithCoreOptions(core.WithJournalWrap(func(inner coordinator.Journal) coordinator.Journal { j.inner = inner; return j }))
	e := etcdtest.StartEmbedded(t)
	n := startNodeOpts(t, "node-"+t.Name(), e.Endpoints, t.TempDir(), []server.Option{wrap}, func(c *core.Config) { c.ShutdownTimeout = 3 * time.Second })
	sawReason := false
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		info := n.genInfo(t, "")
		if info.GetServing() {
			break
		}
		if strings.Contains(info.GetReason(), "first reservation") && strings.Contains(info.GetReason(), "injected data-dir failure") {
			sawReason = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !sawReason {
		t.Fatal("the failed first reservation was never named as the reason for not serving")
	}
	// Four failures on the 200 ms cadence: serving within about a second.
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("serving only %v after start (retries not on the 200 ms cadence)", took)
	}
	waitServing(t, n.ids, "", 3*time.Second)

	j.stall.Store(true)
	defer close(j.release)
	waitNotServing(t, n.ids, "", 7*time.Second)
	if r := n.genInfo(t, "").GetReason(); !strings.Contains(r, "reservation") {
		t.Fatalf("reason %q does not name the reservation", r)
	}
	start = time.Now()
	n.stop()
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("SIGTERM drain took %v with a stalled data dir", d)
	}
}

// A drain ends open health watches and completes within the in-flight
// calls plus 2 s (before: the full --shutdown-timeout with one watcher).
func TestDrainEndsHealthWatches(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.ShutdownTimeout = 20 * time.Second })
	waitServing(t, n.ids, "", 10*time.Second)
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := n.health.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	n.stopOnce.Do(func() {}) // this test stops the node itself
	defer n.coord.Close()
	start := time.Now()
	stopped := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		n.node.Shutdown(ctx)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain is still waiting 10 s later with one health watch open")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("drain took %v with one health watch open", d)
	}
}

// Fault injection refuses a request that carries an Origin header: a web
// page open on the host must not move a node's clock.
func TestFaultRefusesBrowsers(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection)
	req, _ := http.NewRequest("POST", "http://"+n.node.FaultAddr()+"/debug/fault/clock-offset", strings.NewReader("offset=1h"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("a POST with an Origin header: %s; want 403", resp.Status)
	}
	if o := n.offset.CurrentOffset(); o != 0 {
		t.Fatalf("the offset moved to %v", o)
	}
	n.setOffset(t, time.Millisecond) // without Origin: accepted
}

// A generator whose IDs within max-lead overflow 64 bits is refused at
// start naming the values (before, the largest batch overflowed to 0).
func TestMaxBatchOverflowRefused(t *testing.T) {
	const wide = "wide=time=49,worker=1,seq=13,unit=1us,epoch=2026-01-01T00:00:00Z"
	_, err := nodeConfig(generators(wide), func(c *core.Config) { c.MaxLead = 2_500_000 * time.Hour })
	if !errors.Is(err, core.ErrConfig) || !strings.Contains(err.Error(), "--max-lead") || !strings.Contains(err.Error(), "overflow") {
		t.Fatalf("got %v", err)
	}
	cfg, err := nodeConfig(generators(wide), func(c *core.Config) { c.MaxLead = time.Second })
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.MaxBatchFor(cfg.Generators[0]); b != cfg.MaxBatch {
		t.Fatalf("MaxBatchFor %d; want --max-batch %d", b, cfg.MaxBatch)
	}
}

// A wait for the clock longer than the caller's deadline is refused at
// once as overloaded naming the lead (RESOURCE_EXHAUSTED, OVERLOADED, bound
// max-lead, RetryInfo the wait; before: DEADLINE_EXCEEDED after the whole
// deadline), and an HTTP request, which may come without any deadline,
// gets the server's own (--http-request-timeout).
func TestClockWaitBeyondDeadlineIsRefusedAtOnce(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	// compact: 64 IDs per 1 s unit, max-lead 2 s: three batches of 128 put
	// the generator at its lead limit, and the next 128 need at least one
	// more whole unit (a wait of a second or more, after at most one
	// shorter wait for the unit in progress).
	n := startNode(t, e.Endpoints, t.TempDir(), generators("user=compact"),
		func(c *core.Config) { c.HTTPRequestTimeout = 300 * time.Millisecond })
	waitServing(t, n.ids, "user", 10*time.Second)
	// Take whole batches until the generator stands at its lead limit
	// (Info's clock_lead): the next 128 need a whole unit more, a wait of
	// half a second or more.
	toLeadLimit(t, n)
	// The code tells "refused at once" (RESOURCE_EXHAUSTED naming the
	// lead) from "waited" (DEADLINE_EXCEEDED after the 200 ms): no clock is
	// needed.
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := n.ids.NextIDs(c, &firnv1.NextIDsRequest{Generator: "user", Count: 128})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "ahead of the clock") {
		t.Fatalf("gRPC with a 200 ms deadline: %v; want RESOURCE_EXHAUSTED naming the lead, at once", err)
	}
	wantInfo(t, "gRPC with a 200 ms deadline", err, "OVERLOADED", map[string]string{"bound": "max-lead"})
	toLeadLimit(t, n)
	// 429 (refused) against 504 (the server's own 300 ms deadline
	// waited out).
	resp, err := http.Get(n.base + "/v1/ids?generator=user&count=128") // no client deadline
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("HTTP without a deadline: %s (Retry-After %q); want 429 with Retry-After at once within --http-request-timeout", resp.Status, resp.Header.Get("Retry-After"))
	}
}

// toLeadLimit takes batches of 128 of the compact generator "user" (64 IDs
// per 1 s unit, max-lead 2 s) until its logical time stands more than
// 1.5 s ahead of the clock, as Info says: its unit is the last the lead
// allows, and for half a second more, so the next 128 need a unit beyond
// it.
func toLeadLimit(t *testing.T, n *tnode) {
	t.Helper()
	for i := 0; ; i++ {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.ids.NextIDs(c, &firnv1.NextIDsRequest{Generator: "user", Count: 128})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		info, err := n.ids.Info(c, &firnv1.InfoRequest{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range info.GetGenerators() {
			if g.GetName() == "user" && g.GetClockLead().AsDuration() > 1500*time.Millisecond {
				return
			}
		}
		if i == 20 {
			t.Fatal("the generator never stood 1.5 s ahead of the clock")
		}
	}
}

// transitionAt is the time of the first log line holding what (the text
// handler's time=… field).
func transitionAt(logs, what string) (time.Time, bool) {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, what) {
			continue
		}
		v, ok := strings.CutPrefix(strings.Fields(line)[0], "time=")
		if !ok {
			return time.Time{}, false
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		return at, err == nil
	}
	return time.Time{}, false
}

// A holder waiting for its floor (here the restore guard of a shared
// coordinator, about 7 s) keeps its owner record's heartbeat fresh: a
// record left older than coordinator.TakeBackAge is taken back by any
// process of the same instance, and two of them (a replacement on this
// data dir beside its thawed zombie) took the worker from each other for
// as long as the chaos suite's zombie scenario waited.
func TestFloorWaitKeepsHeartbeat(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), sharedCoordinator)
	var taken time.Time
	beats := 0
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		hs, err := n.coord.(coordinator.Admin).Workers(ctx, n.cfg.Generators[0].Name)
		cancel()
		if err != nil || len(hs) == 0 || !hs[0].Live {
			continue
		}
		if n.genInfo(t, "").GetServing() {
			t.Fatal("served before the restore guard's wait: the test sees no floor wait")
		}
		wall := hs[0].Heartbeat.Wall
		switch {
		case taken.IsZero():
			taken = wall
		case wall.After(taken):
			beats++
			taken = wall
		}
		if age := time.Since(wall); age > coordinator.TakeBackAge {
			t.Fatalf("the owner record's heartbeat is %v old while the holder waits for its floor (take-back age %v)", age, coordinator.TakeBackAge)
		}
	}
	if beats < 2 {
		t.Fatalf("%d heartbeats in 5 s of waiting for the floor, want one a second", beats)
	}
}
