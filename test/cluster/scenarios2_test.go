package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/firnid/firn/client"
	"github.com/firnid/firn/clockguard/ntptest"
	"github.com/firnid/firn/coordinator/etcd/etcdtest"
	"github.com/firnid/firn/coordinator/zookeeper/zktest"
	firnv1 "github.com/firnid/firn/proto/firn/v1"
)

// ntpTrio starts three NTP responders and returns them with the --ntp value.
func ntpTrio(t testing.TB) ([]*ntptest.Server, string) {
	var srvs []*ntptest.Server
	var addrs []string
	for i := 0; i < 3; i++ {
		s := ntptest.NewServer(t)
		srvs = append(srvs, s)
		addrs = append(addrs, s.Addr())
	}
	return srvs, strings.Join(addrs, ",")
}

func metric(t testing.TB, n *Node, name string) string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func init() {
	scenarios = append(scenarios,
		scenario{name: "NTP configured: 5ms 50ms absorbed, 500ms stops at the next check", run: func(e *env) {
			_, ntp := ntpTrio(e.t)
			n := e.newNode("n1", "--ntp", ntp, "--ntp-interval", "1s")
			e.startAll(n)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 3, Deadline: 2 * time.Second})
			for _, step := range []time.Duration{5 * time.Millisecond, 50 * time.Millisecond} {
				n.SetOffset(-step)
				time.Sleep(1500 * time.Millisecond) // one NTP check sees it
				n.SetOffset(0)
			}
			okUntil := time.Now()
			n.SetOffset(-500 * time.Millisecond)
			d, body, err := n.WaitNotReady(4 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.FailClosed = d.Round(time.Millisecond).String()
			if !strings.Contains(body, "NTP offset") || !strings.Contains(body, "max-clock-offset") {
				e.t.Errorf("reason does not name the NTP offset and its limit: %s", body)
			}
			n.SetOffset(0)
			r, err := n.WaitReady(4 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.Recover = r.Round(time.Millisecond).String()
			load.Stop()
			countFailures(e, e.rec.Failures(), func(f Failure) bool {
				return f.At.After(okUntil) && f.Code == codes.Unavailable && strings.Contains(f.Msg, "NTP")
			})
			e.check(Bounds{Skew: 500 * time.Millisecond})
		}},
		scenario{name: "NTP offset at start, during operation, unreachable", run: func(e *env) {
			srvs, ntp := ntpTrio(e.t)
			for _, s := range srvs {
				s.SetOffset(400 * time.Millisecond)
			}
			n := e.newNode("n1", "--ntp", ntp, "--ntp-interval", "1s")
			n.Start()
			if _, err := n.WaitReady(3 * time.Second); err == nil {
				e.t.Fatal("served with an NTP offset of 400ms beyond --max-clock-offset 250ms")
			}
			if _, body := n.Ready(); !strings.Contains(body, "NTP offset") {
				e.t.Errorf("reason: %s", body)
			}
			for _, s := range srvs {
				s.SetOffset(0)
			}
			if _, err := n.WaitReady(4 * time.Second); err != nil {
				e.t.Fatal(err)
			}
			// During operation.
			for _, s := range srvs {
				s.SetOffset(-400 * time.Millisecond)
			}
			d, _, err := n.WaitNotReady(4 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.FailClosed = d.Round(time.Millisecond).String()
			// Unreachable, with NTP required (the default with --ntp).
			for _, s := range srvs {
				s.SetOffset(0)
				s.SetSilent(true)
			}
			n.Stop(10 * time.Second)
			n.Start()
			if _, err := n.WaitReady(4 * time.Second); err == nil {
				e.t.Fatal("served with NTP required and unreachable")
			}
			if _, body := n.Ready(); !strings.Contains(body, "unreachable") {
				e.t.Errorf("reason: %s", body)
			}
			for _, s := range srvs {
				s.SetSilent(false)
			}
			r, err := n.WaitReady(6 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.Recover = r.Round(time.Millisecond).String()
		}},
		scenario{name: "clock +5s at start among two peers never serves", run: func(e *env) {
			n1, n2 := e.newNode("n1"), e.newNode("n2")
			e.startAll(n1, n2)
			n3 := e.newNode("n3")
			n3.Start("--fault-clock-offset", "5s")
			// Never: not for a moment after its start either.
			for start := time.Now(); time.Since(start) < 3*time.Second; time.Sleep(25 * time.Millisecond) {
				if code, _ := n3.Ready(); code == 200 {
					e.t.Fatalf("the +5s node serves %v after its start", time.Since(start).Round(time.Millisecond))
				}
			}
			if code, body := n3.Ready(); code == 200 {
				e.t.Fatal("the +5s node serves")
			} else if !strings.Contains(body, "peer median") || !strings.Contains(body, "max-peer-skew") {
				e.t.Errorf("reason does not name the peer median and --max-peer-skew: %s", body)
			}
			n3.Stop(10 * time.Second)
			n3.Start()
			d, err := n3.WaitReady(10 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.Recover = d.Round(time.Millisecond).String()
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2})
			time.Sleep(time.Second)
			load.Stop()
			countFailures(e, e.rec.Failures(), none)
			e.check(Bounds{})
		}},
		scenario{name: "clock +10s on a lone node, then back", run: func(e *env) {
			n := e.newNode("n1")
			e.startAll(n)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
			time.Sleep(500 * time.Millisecond)
			n.SetOffset(10 * time.Second)
			time.Sleep(1500 * time.Millisecond)
			if code, body := n.Ready(); code != 200 {
				e.t.Errorf("a lone node without NTP stopped after a forward step: %s", body)
			}
			if m := metric(e.t, n, `firn_clock_steps_total{direction="forward"}`); !strings.HasSuffix(m, " 1") && !strings.Contains(m, " 2") {
				e.t.Errorf("forward step not counted: %q", m)
			}
			backAt := time.Now()
			n.SetOffset(0) // back 10s: beyond max-lead, fail closed until the clock catches up
			d, _, err := n.WaitNotReady(3 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.FailClosed = d.Round(time.Millisecond).String()
			r, err := n.WaitReady(12 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.Recover = r.Round(time.Millisecond).String()
			load.Stop()
			countFailures(e, e.rec.Failures(), func(f Failure) bool {
				return f.At.After(backAt) && f.Code == codes.Unavailable && strings.Contains(f.Msg, "rolled back")
			})
			e.check(Bounds{Skew: 10 * time.Second})
		}},
		scenario{name: "clock +10s on one node of three stops it", run: func(e *env) {
			n1, n2, n3 := e.newNode("n1"), e.newNode("n2"), e.newNode("n3")
			e.startAll(n1, n2, n3)
			load := StartLoad(e.rec, []*Node{n2, n3}, LoadOptions{Callers: 2})
			n1.SetOffset(10 * time.Second)
			d, body, err := n1.WaitNotReady(4 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.FailClosed = d.Round(time.Millisecond).String()
			if !strings.Contains(body, "peer median") {
				e.t.Errorf("reason: %s", body)
			}
			time.Sleep(time.Second)
			for _, n := range []*Node{n2, n3} {
				if code, body := n.Ready(); code != 200 {
					e.t.Errorf("%s stopped too: %s", n.Name, body)
				}
			}
			load.Stop()
			countFailures(e, e.rec.Failures(), none)
			e.check(Bounds{Skew: 10 * time.Second})
		}},
		scenario{name: "restart 10s behind its reservation", run: func(e *env) {
			n := e.newNode("n1")
			e.startAll(n)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2})
			time.Sleep(1500 * time.Millisecond)
			load.Stop()
			n.Kill()
			n.Start("--fault-clock-offset", "-10s")
			time.Sleep(3 * time.Second)
			if code, _ := n.Ready(); code == 200 {
				// Serving is allowed only on IDs above the reservation;
				// the checker below verifies that.
				e.t.Log("serving 10s behind: on another worker or above its floor")
			}
			load = StartLoad(e.rec, e.nodes, LoadOptions{Callers: 1, Deadline: 2 * time.Second})
			n.SetOffset(0)
			if _, err := n.WaitReady(10 * time.Second); err != nil {
				e.t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
			load.Stop()
			countFailures(e, e.rec.Failures(), func(f Failure) bool { return true })
			e.check(Bounds{Skew: 10 * time.Second})
		}},
		scenario{name: "ten nodes started at once get distinct worker IDs", run: func(e *env) {
			var ns []*Node
			for i := 0; i < 10; i++ {
				ns = append(ns, e.newNode(fmt.Sprintf("n%d", i)))
			}
			var wg sync.WaitGroup
			for _, n := range ns {
				n := n
				wg.Add(1)
				go func() { defer wg.Done(); n.Start() }()
			}
			wg.Wait()
			seen := map[string]string{}
			for _, n := range ns {
				if _, err := n.WaitReady(30 * time.Second); err != nil {
					e.t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				info, err := n.ID.Info(ctx, &firnv1.InfoRequest{})
				cancel()
				if err != nil {
					e.t.Fatal(err)
				}
				g := info.GetGenerators()[0]
				k := fmt.Sprintf("dc=%d worker=%d", g.GetDatacenter(), g.GetWorker())
				if other, dup := seen[k]; dup {
					e.t.Errorf("%s and %s both hold %s", other, n.Name, k)
				}
				seen[k] = n.Name
			}
			load := StartLoad(e.rec, ns, LoadOptions{Callers: 1, Pause: 5 * time.Millisecond})
			time.Sleep(time.Second)
			load.Stop()
			countFailures(e, e.rec.Failures(), none)
			e.check(Bounds{})
		}},
		scenario{name: "bad input from a fuzzing client", run: func(e *env) {
			n := e.newNode("n1")
			e.startAll(n)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2})
			rng := rand.New(rand.NewPCG(1, 2))
			ctx := context.Background()
			codesSeen := map[codes.Code]int{}
			for i := 0; i < 300; i++ {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				var err error
				switch i % 5 {
				case 0:
					_, err = n.ID.NextIDs(cctx, &firnv1.NextIDsRequest{Count: []uint32{0, 100_001, 1 << 31, rng.Uint32()}[rng.IntN(4)]})
				case 1:
					_, err = n.ID.NextID(cctx, &firnv1.NextIDRequest{Generator: fmt.Sprintf("nope-%d", rng.IntN(1000))})
				case 2:
					_, err = n.ID.Decode(cctx, &firnv1.DecodeRequest{Id: rng.Uint64() | 1<<63})
				case 3:
					_, err = n.ID.NextID(cctx, &firnv1.NextIDRequest{Generator: strings.Repeat("x", 70<<10)})
				case 4:
					// Random bytes at the gRPC port, and odd HTTP.
					if c, derr := net.DialTimeout("tcp", n.GRPCAddr, time.Second); derr == nil {
						junk := make([]byte, 1+rng.IntN(4096))
						for j := range junk {
							junk[j] = byte(rng.Uint32())
						}
						c.SetDeadline(time.Now().Add(200 * time.Millisecond))
						c.Write(junk)
						c.Read(make([]byte, 64))
						c.Close()
					}
					hc := http.Client{Timeout: time.Second}
					for _, path := range []string{"/v1/ids?count=-1", "/v1/ids?count=abc", "/v1/ids?count=99999999999", "/v1/decode/18446744073709551615",
						"/v1/decode/xyz", "/v1/ids?generator=%00", "/../../etc/passwd"} {
						if resp, herr := hc.Get("http://" + n.HTTPAddr + path); herr == nil {
							if resp.StatusCode == 200 && !strings.HasPrefix(path, "/v1/decode/1844") {
								e.t.Errorf("GET %s answered 200", path)
							}
							resp.Body.Close()
						}
					}
					if resp, herr := hc.Post("http://"+n.HTTPAddr+"/admin/resume", "text/plain", bytes.NewReader(junkBytes(rng))); herr == nil {
						if resp.StatusCode != 403 {
							e.t.Errorf("POST /admin/resume without mTLS: %d", resp.StatusCode)
						}
						resp.Body.Close()
					}
				}
				cancel()
				if err != nil {
					codesSeen[status.Code(err)]++
				} else if i%5 != 4 {
					e.t.Errorf("bad request %d accepted", i)
				}
			}
			for c := range codesSeen {
				if c != codes.InvalidArgument && c != codes.NotFound && c != codes.ResourceExhausted {
					e.t.Errorf("bad input answered %s (%d times)", c, codesSeen[c])
				}
			}
			if code, body := n.Ready(); code != 200 {
				e.t.Errorf("not serving after the fuzzing: %s", body)
			}
			load.Stop()
			countFailures(e, e.rec.Failures(), none)
			e.check(Bounds{})
		}},
		scenario{name: "clock back 2s and 30s: the Go client fails over", run: func(e *env) {
			n1, n2, n3 := e.newNode("n1"), e.newNode("n2"), e.newNode("n3")
			e.startAll(n1, n2, n3)
			c, err := client.New([]string{n1.GRPCAddr, n2.GRPCAddr, n3.GRPCAddr},
				client.WithMaxAge(200*time.Millisecond), client.WithCallTimeout(time.Second))
			if err != nil {
				e.t.Fatal(err)
			}
			defer c.Close()
			load := StartClientLoad(e.rec, c, 4, 3*time.Second, 0)
			for _, step := range []time.Duration{2 * time.Second, 30 * time.Second} {
				time.Sleep(700 * time.Millisecond)
				n1.SetOffset(-step) // one node of three: the others hold the peer median
				if _, _, err := n1.WaitNotReady(3 * time.Second); err != nil {
					e.t.Fatal(err)
				}
				time.Sleep(1500 * time.Millisecond)
				n1.SetOffset(0)
				if _, err := n1.WaitReady(5 * time.Second); err != nil {
					e.t.Fatal(err)
				}
			}
			time.Sleep(500 * time.Millisecond)
			load.Stop()
			countFailures(e, e.rec.Failures(), none)
			e.check(Bounds{Prefetch: 200 * time.Millisecond, Skew: 30 * time.Second})
		}},
		scenario{name: "etcd leader killed, one member down", run: func(e *env) {
			n1, n2 := e.newNode("n1"), e.newNode("n2")
			e.startAll(n1, n2)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
			time.Sleep(time.Second)
			m := etcdLeader(e)
			e.t.Logf("stopping the etcd leader %s", m.Name)
			m.Stop()
			time.Sleep(4 * time.Second)
			m.Restart(e.t)
			time.Sleep(2 * time.Second)
			load.Stop()
			e.etcd.WaitCaughtUp(e.t) // the next scenario shares the cluster
			countFailures(e, e.rec.Failures(), none)
			e.check(Bounds{})
		}},
		scenario{name: "etcd quorum lost beyond the window, then restored", run: func(e *env) {
			n1 := e.newNode("n1")
			e.startAll(n1)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
			time.Sleep(time.Second)
			lost := time.Now()
			a, b := e.etcd.Members[1], e.etcd.Members[2]
			a.Stop()
			b.Stop()
			d, body, err := n1.WaitNotReady(10 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.FailClosed = d.Round(time.Millisecond).String()
			if !strings.Contains(body, "reservation") && !strings.Contains(body, "lease") {
				e.t.Errorf("reason does not name the reservation or the lease: %s", body)
			}
			a.Restart(e.t)
			b.Restart(e.t)
			r, err := n1.WaitReady(20 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.etcd.WaitCaughtUp(e.t)
			e.row.Recover = r.Round(time.Millisecond).String()
			time.Sleep(500 * time.Millisecond)
			load.Stop()
			countFailures(e, e.rec.Failures(), func(f Failure) bool {
				return f.At.After(lost) && (f.Code == codes.Unavailable || f.Code == codes.DeadlineExceeded)
			})
			e.check(Bounds{})
		}},
		scenario{name: "coordinator down when a node starts", both: true, run: func(e *env) {
			n1 := e.newNode("n1")
			e.partition(n1, Blackhole)
			n1.Start()
			// The first dial gives up after its 5 s timeout; then the node
			// listens, does not serve, and says why.
			time.Sleep(7 * time.Second)
			if code, body := n1.Ready(); code != 503 || !strings.Contains(body, "coordinator") {
				e.t.Fatalf("coordinator unreachable at start: /readyz %d %s, want 503 naming the coordinator", code, body)
			}
			if n1.PID() == 0 {
				e.t.Fatal("the node exited")
			}
			healed := time.Now()
			e.partition(n1, Pass)
			for _, p := range e.proxies[n1] {
				p.Sever()
			}
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 1, Deadline: 2 * time.Second})
			r, err := n1.WaitReady(15 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.Recover = r.Round(time.Millisecond).String()
			time.Sleep(500 * time.Millisecond)
			load.Stop()
			countFailures(e, e.rec.Failures(), func(f Failure) bool { return f.At.Before(healed.Add(r + time.Second)) })
			e.check(Bounds{})
		}},
		scenario{name: "zookeeper leader killed", zkOnly: true, run: func(e *env) {
			n1, n2 := e.newNode("n1"), e.newNode("n2")
			e.startAll(n1, n2)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
			time.Sleep(time.Second)
			leader, err := e.zk.Leader()
			if err != nil {
				e.t.Fatal(err)
			}
			leader.Kill()
			time.Sleep(4 * time.Second)
			if err := leader.Start(); err != nil {
				e.t.Fatal(err)
			}
			if err := leader.WaitReady(20 * time.Second); err != nil {
				e.t.Fatal(err)
			}
			time.Sleep(time.Second)
			load.Stop()
			countFailures(e, e.rec.Failures(), none)
			e.check(Bounds{})
		}},
		scenario{name: "zookeeper session expiry (its server paused past the session timeout)", zkOnly: true, run: func(e *env) {
			// The node knows one follower only; pausing it past the session
			// timeout lets the rest of the ensemble expire the session.
			leader, err := e.zk.Leader()
			if err != nil {
				e.t.Fatal(err)
			}
			var follower *zktest.Server
			for _, s := range e.zk.Servers {
				if s != leader {
					follower = s
					break
				}
			}
			n1 := e.newNodeOn("n1", []string{follower.Addr}, e.ttlFlags()...)
			e.startAll(n1)
			load := StartLoad(e.rec, e.nodes, LoadOptions{Callers: 2, Deadline: 2 * time.Second})
			time.Sleep(time.Second)
			paused := time.Now()
			follower.Freeze()
			time.Sleep(e.ttl() + 3*time.Second)
			follower.Thaw()
			r, err := n1.WaitReady(20 * time.Second)
			if err != nil {
				e.t.Fatal(err)
			}
			e.row.Recover = r.Round(time.Millisecond).String()
			time.Sleep(time.Second)
			load.Stop()
			if hs := n1.Holders(); len(hs) < 2 {
				e.t.Errorf("the session did not expire: %d holder intervals (want a lease loss and a new acquisition)", len(hs))
			}
			countFailures(e, e.rec.Failures(), func(f Failure) bool {
				return f.At.After(paused) && (f.Code == codes.Unavailable || f.Code == codes.DeadlineExceeded)
			})
			e.check(Bounds{})
		}},
	)
}

func junkBytes(r *rand.Rand) []byte {
	b := make([]byte, r.IntN(512))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// etcdLeader finds the member that leads the shared etcd cluster.
func etcdLeader(e *env) *etcdtest.Member {
	cli := e.etcd.Client(e.t)
	for _, m := range e.etcd.Members {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, m.ClientURL)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	e.t.Fatal("no etcd leader found")
	return nil
}
