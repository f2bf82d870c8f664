package cluster

import (
	"context"
	"strings"
	"time"

	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/internal/testing/zktest"
)

// coordinatorScenarios: the coordinator's own faults — an etcd leader
// killed, quorum lost, a coordinator down when a node starts, a ZooKeeper
// leader killed, a session expired.
var coordinatorScenarios = []scenario{
	{name: "etcd leader killed, one member down", run: func(e *env) {
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
	{name: "etcd quorum lost beyond the window, then restored", run: func(e *env) {
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
		quorum := fault{node: "n1", from: lost, causes: coordinatorLost}.until(time.Now())
		e.etcd.WaitCaughtUp(e.t)
		e.row.Recover = r.Round(time.Millisecond).String()
		time.Sleep(500 * time.Millisecond)
		load.Stop()
		countFailures(e, e.rec.Failures(), within(quorum))
		e.check(Bounds{})
	}},
	{name: "coordinator down when a node starts", beside: true, both: true, run: func(e *env) {
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
		down := fault{node: "n1", from: healed, causes: coordinatorLost}.until(time.Now())
		e.settle(500 * time.Millisecond)
		load.Stop()
		countFailures(e, e.rec.Failures(), within(down))
		e.check(Bounds{})
	}},
	{name: "zookeeper leader killed", zkOnly: true, run: func(e *env) {
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
	{name: "zookeeper session expiry (its server paused past the session timeout)", zkOnly: true, run: func(e *env) {
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
		expired := fault{node: "n1", from: paused, causes: leaseLost}.until(time.Now())
		time.Sleep(time.Second)
		load.Stop()
		if hs := n1.Intervals(); len(hs) < 2 {
			e.t.Errorf("the session did not expire: %d holder intervals (want a lease loss and a new acquisition)", len(hs))
		}
		countFailures(e, e.rec.Failures(), within(expired))
		e.check(Bounds{})
	}},
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
