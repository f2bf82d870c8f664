package server_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

var rollbackRe = regexp.MustCompile(`clock rolled back ([0-9.]+[a-zµ]+), limit ([0-9.]+[a-zµ]+)`)

// load runs callers issuing unary and batch calls until stop closes; each
// caller's IDs must strictly increase and every failure is counted.
type load struct {
	wg     sync.WaitGroup
	stop   chan struct{}
	calls  atomic.Int64
	mu     sync.Mutex
	errs   []error
	seqs   [][]uint64
	broken []string
}

func startLoad(t *testing.T, cli firnv1.IDServiceClient, callers int) *load {
	l := &load{stop: make(chan struct{}), seqs: make([][]uint64, callers)}
	for i := range callers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var last uint64
			for j := 0; ; j++ {
				select {
				case <-l.stop:
					return
				default:
				}
				var got []uint64
				var err error
				if j%2 == 0 {
					var r *firnv1.NextIDResponse
					if r, err = cli.NextID(ctx(t), &firnv1.NextIDRequest{}); err == nil {
						got = []uint64{r.GetId()}
					}
				} else {
					var r *firnv1.NextIDsResponse
					if r, err = cli.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 50}); err == nil {
						got = r.GetIds()
					}
				}
				l.calls.Add(1)
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				}
				for _, id := range got {
					if id <= last {
						l.broken = append(l.broken, fmt.Sprintf("caller %d: %d after %d", i, id, last))
					}
					last = id
				}
				l.seqs[i] = append(l.seqs[i], got...)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

// Fault injection: a −300ms offset under continuous load is absorbed; −5s
// fails closed (UNAVAILABLE naming the step and the limit, /readyz 503,
// health NOT_SERVING) and the node serves again once the offset clears.
func TestFaultClockOffset(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection)
	waitServing(t, n.ids, "", 10*time.Second)
	if n.node.FaultAddr() == "" {
		t.Fatal("no fault listener with --enable-fault-injection")
	}

	// −300ms, within max-lead 1s: no call fails.
	l := startLoad(t, n.ids, 3)
	awaitCalls(t, &l.calls, 6) // under load before the fault
	n.setOffset(t, -300*time.Millisecond)
	time.Sleep(1200 * time.Millisecond)
	l.finish()
	if len(l.errs) > 0 {
		t.Fatalf("%d of %d calls failed under a −300ms step; first: %v", len(l.errs), l.calls.Load(), l.errs[0])
	}
	if len(l.broken) > 0 {
		t.Fatalf("IDs went backwards under a −300ms step: %v", l.broken[0])
	}
	seen := map[uint64]bool{}
	var highest uint64
	for _, s := range l.seqs {
		for _, id := range s {
			if seen[id] {
				t.Fatalf("ID %d issued twice", id)
			}
			seen[id] = true
			highest = max(highest, id)
		}
	}
	if l.calls.Load() < 10 {
		t.Fatalf("only %d calls under load", l.calls.Load())
	}
	fams := scrape(t, n.httpc, n.base)
	if v := value(t, fams, "firn_clock_steps_total", map[string]string{"direction": "backward"}); v < 1 {
		t.Fatalf("the −300ms offset was not seen as a backward step (firn_clock_steps_total %v)", v)
	}
	if v := value(t, fams, "firn_fault_clock_offset_seconds", nil); v != -0.3 {
		t.Fatalf("firn_fault_clock_offset_seconds %v, want -0.3", v)
	}

	// Back to 0, then a −5s step: beyond max-lead, the node fails closed.
	n.setOffset(t, 0)
	time.Sleep(200 * time.Millisecond)
	n.setOffset(t, -5*time.Second)
	var err error
	for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(10 * time.Millisecond) {
		if _, err = n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
			break
		}
	}
	wantCode(t, "NextID after a −5s step", err, codes.Unavailable, "clock rolled back", "limit 1s")
	m := rollbackRe.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		t.Fatalf("message %q does not name the step", status.Convert(err).Message())
	}
	step, _ := time.ParseDuration(m[1])
	if step < 4900*time.Millisecond || step > 5100*time.Millisecond || m[2] != "1s" {
		t.Fatalf("message %q: step %v, limit %s; want about 5s and 1s", status.Convert(err).Message(), step, m[2])
	}
	_, err = n.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 10})
	wantCode(t, "NextIDs after a −5s step", err, codes.Unavailable, "clock rolled back")
	// The node serves again by itself once the clock reaches the last
	// time it issued (less max-lead): about 4 s from now. The refusal
	// says so (RetryInfo), as the HTTP answer does (Retry-After).
	retry := wantInfo(t, "NextIDs after a −5s step", err, "CLOCK_ROLLBACK", map[string]string{"limit_ms": "1000"})
	if d := retry.GetRetryDelay().AsDuration(); retry == nil || d < 3*time.Second || d > 4100*time.Millisecond {
		t.Fatalf("NextIDs after a −5s step (max-lead 1s): RetryInfo %v, want about 4s (when the clock reaches the last issued time, less max-lead)", retry)
	}
	wantHTTP(t, n, "/v1/ids", 503, "CLOCK_ROLLBACK", "clock rolled back")
	if resp, err := n.httpc.Get(n.base + "/v1/ids"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.Header.Get("Retry-After") == "" {
		t.Fatalf("GET /v1/ids after a −5s step: no Retry-After")
	}
	code, body := httpGet(t, n.httpc, n.base+"/readyz")
	if code != 503 || !strings.Contains(body, "clock rolled back") {
		t.Fatalf("/readyz %d %s after a −5s step", code, body)
	}
	for _, s := range []string{"", "default"} {
		resp, err := n.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: s})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("health %q after a −5s step: %v, %v", s, resp, err)
		}
	}
	// Held out while the clock stays behind (auto recovery waits for it).
	time.Sleep(500 * time.Millisecond)
	if info := n.genInfo(t, ""); info.GetServing() {
		t.Fatalf("serving again while the clock is still 5s behind: %v", info)
	}

	// The offset clears: serving again, IDs above everything before.
	n.setOffset(t, 0)
	waitServing(t, n.ids, "", 5*time.Second)
	resp, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
	if err != nil {
		t.Fatalf("NextID after the offset cleared: %v", err)
	}
	if resp.GetId() <= highest {
		t.Fatalf("ID %d after recovery is not above %d", resp.GetId(), highest)
	}
	if code, body := httpGet(t, n.httpc, n.base+"/readyz"); code != 200 {
		t.Fatalf("/readyz %d %s after recovery", code, body)
	}
	hr, err := n.health.Check(ctx(t), &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after recovery: %v, %v", hr, err)
	}
}

// --fault-clock-offset applies from the first clock read: IDs carry the
// shifted time, and no step is seen.
func TestFaultClockOffsetFromStart(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection,
		func(c *core.Config) { c.FaultClockOffset = -3 * time.Second })
	waitServing(t, n.ids, "", 10*time.Second)
	resp, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snow, _ := generator.ParseLayout("snowflake")
	p, err := snow.Decode(resp.GetId())
	if err != nil {
		t.Fatal(err)
	}
	behind := p.Time.Sub(wallNow())
	if behind > -2500*time.Millisecond || behind < -4*time.Second {
		t.Fatalf("ID time %v is %v from now, want about −3s", p.Time, behind)
	}
	fams := scrape(t, n.httpc, n.base)
	if v := value(t, fams, "firn_clock_steps_total", map[string]string{"direction": "backward"}); v != 0 {
		t.Fatalf("a start offset counted as %v backward steps", v)
	}
}

// The fault listener on loopback answers local callers alone, its GET
// included: a page that rebinds its own name to 127.0.0.1 sends no
// Origin with a GET, but its own name as Host (server.LocalOnly, the
// rule /admin/resume and the profiler keep).
func TestFaultListenerLocalCallersOnly(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection)
	waitServing(t, n.ids, "", 10*time.Second)
	for _, c := range []struct {
		method, host, origin string
		code                 int
	}{
		{"GET", "", "", 200},
		{"GET", "[::1]", "", 200},
		{"GET", "localhost:7302", "", 200},
		{"GET", "rebound.evil.example", "", 403},
		{"GET", "rebound.evil.example:" + portOf(t, n.node.FaultAddr()), "", 403},
		{"GET", "", "http://evil.example", 403},
		{"POST", "rebound.evil.example", "", 403},
	} {
		req, err := http.NewRequest(c.method, "http://"+n.node.FaultAddr()+"/debug/fault/clock-offset?offset=-5s", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.host != "" {
			req.Host = c.host
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s Host %q Origin %q: %d %s, want %d", c.method, c.host, c.origin, resp.StatusCode, b, c.code)
		}
	}
	if info := n.genInfo(t, ""); !info.GetServing() {
		t.Fatalf("a refused POST moved the clock: %v", info)
	}
}

// Without --enable-fault-injection nothing listens on the fault address,
// and the configuration refuses --fault-clock-offset.
func TestFaultListenerAbsentWithoutFlag(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	// A port found free can be the one the node's own listeners, bound
	// to port 0, are given next: then the node is started again with
	// another, so that what answers there can only be a fault listener.
	var addr string
	var n *tnode
	for range 5 {
		addr = freeAddr(t)
		n = startNode(t, e.Endpoints, t.TempDir(), func(c *core.Config) { c.FaultAddr = addr })
		if addr != n.node.HTTPAddr() && addr != n.node.GRPCAddr() {
			break
		}
		n.stop()
	}
	waitServing(t, n.ids, "", 10*time.Second)
	if a := n.node.FaultAddr(); a != "" {
		t.Fatalf("FaultAddr %q without the flag", a)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("something listens on the fault address %s without the flag", addr)
	}
	fams := scrape(t, n.httpc, n.base)
	if v := value(t, fams, "firn_fault_injection_enabled", nil); v != 0 {
		t.Fatalf("firn_fault_injection_enabled %v without the flag", v)
	}

	_, err := nodeConfig(func(c *core.Config) { c.FaultClockOffset = -5 * time.Second })
	if !errors.Is(err, core.ErrConfig) || !strings.Contains(err.Error(), "--fault-clock-offset") ||
		!strings.Contains(err.Error(), "--enable-fault-injection") {
		t.Fatalf("--fault-clock-offset without the flag: %v", err)
	}
}

// An idle node (no ID calls, so the generator never reads the clock) sees
// a −5s step through its step detector and fails closed, and serves again
// once the offset clears: the detector and the holder's loop run at idle,
// not only on the request path.
func TestIdleRollbackFailsClosedWithoutCalls(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir(), faultInjection)
	waitServing(t, n.ids, "", 10*time.Second)
	if _, err := n.ids.NextID(ctx(t), &firnv1.NextIDRequest{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)

	n.setOffset(t, -5*time.Second)
	waitNotServing(t, n.ids, "", 3*time.Second)
	if code, body := httpGet(t, n.httpc, n.base+"/readyz"); code != 503 || !strings.Contains(body, "clock rolled back") {
		t.Fatalf("/readyz %d %s at idle after a −5s step", code, body)
	}
	n.setOffset(t, 0)
	waitServing(t, n.ids, "", 3*time.Second)
}
