package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/zktest"
)

var sysClock = clockguard.NewSystem()

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func beat(n coordinator.NodeInfo) coordinator.Heartbeat {
	w, _ := sysClock.Now()
	return coordinator.Heartbeat{Node: n, Wall: w}
}

func acquire(t testing.TB, c coordinator.Coordinator, spec coordinator.Spec, n coordinator.NodeInfo) coordinator.Lease {
	t.Helper()
	l, err := c.Acquire(ctxT(t, 20*time.Second), spec, n)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", spec.Generator, n.Name, err)
	}
	return l
}

func reserve(t testing.TB, l coordinator.Lease, until int64, n coordinator.NodeInfo) {
	t.Helper()
	if err := l.Reserve(ctxT(t, 10*time.Second), until, beat(n)); err != nil {
		t.Fatalf("Reserve(%d) on %s: %v", until, l.Slot(), err)
	}
}

func isDone(l coordinator.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

func newCluster(t *testing.T, b *zktest.Backend) *zktest.Cluster {
	return b.NewCluster(t).(*zktest.Cluster)
}

func TestConfigValidate(t *testing.T) {
	good := func() zookeeper.Config {
		c := zookeeper.DefaultConfig()
		c.Servers = []string{"127.0.0.1:2181"}
		c.Clock = sysClock
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*zookeeper.Config)
		want string
	}{
		{"no servers", func(c *zookeeper.Config) { c.Servers = nil }, "servers"},
		{"server without port", func(c *zookeeper.Config) { c.Servers = []string{"127.0.0.1"} }, "host:port"},
		{"relative prefix", func(c *zookeeper.Config) { c.Prefix = "firn" }, "prefix"},
		{"trailing slash", func(c *zookeeper.Config) { c.Prefix = "/firn/" }, "prefix"},
		{"root prefix", func(c *zookeeper.Config) { c.Prefix = "/" }, "prefix"},
		{"dot element", func(c *zookeeper.Config) { c.Prefix = "/a/../b" }, "element"},
		{"zookeeper element", func(c *zookeeper.Config) { c.Prefix = "/zookeeper" }, "element"},
		{"cluster with slash", func(c *zookeeper.Config) { c.Cluster = "a/b" }, "cluster"},
		{"control character", func(c *zookeeper.Config) { c.Cluster = "a\x01" }, "cluster"},
		{"auth without password", func(c *zookeeper.Config) { c.Auth = "firn" }, "user:password"},
		{"auth empty user", func(c *zookeeper.Config) { c.Auth = ":pw" }, "user:password"},
		{"no clock", func(c *zookeeper.Config) { c.Clock = nil }, "Clock"},
		{"no dial timeout", func(c *zookeeper.Config) { c.DialTimeout = 0 }, "dial timeout"},
		{"timing", func(c *zookeeper.Config) { c.Timing.Timeout = 0 }, "coordinator timeout"},
		// 2/3 × 6 s + 1.5 s = 5.5 s > the 5 s window.
		{"window below the session stall", func(c *zookeeper.Config) { c.Timing.LeaseTTL = 6 * time.Second }, "2/3 of the requested ZooKeeper session timeout 6s"},
	} {
		c := good()
		tc.mod(&c)
		err := c.Validate()
		if !errors.Is(err, coordinator.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidSpec naming %q", tc.name, err, tc.want)
		}
	}
	c := good()
	c.Timing.LeaseTTL = 6 * time.Second
	c.Timing.AllowShortWindow = true
	if err := c.Validate(); err != nil {
		t.Errorf("AllowShortWindow does not lift the window relation: %v", err)
	}
}

// TestNegotiatedSessionTimeout: the window is checked against the session
// timeout the server grants, not only the one asked for.
func TestNegotiatedSessionTimeout(t *testing.T) {
	s := zktest.StartStandaloneWith(t, zktest.Options{MinSessionTimeout: 12 * time.Second})
	cfg := zookeeper.DefaultConfig()
	cfg.Servers, cfg.Clock, cfg.Cluster = []string{s.Addr}, sysClock, "negotiated"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("requested 5 s with a 5 s window: %v", err)
	}
	_, err := zookeeper.New(cfg)
	if !errors.Is(err, coordinator.ErrInvalidSpec) || !strings.Contains(err.Error(), "negotiated ZooKeeper session timeout 12s") {
		t.Fatalf("New with a 12 s negotiated timeout: %v, want ErrInvalidSpec naming it", err)
	}
	cfg.Timing.AllowShortWindow = true
	c, err := zookeeper.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.SessionTimeout(); got != 12*time.Second {
		t.Fatalf("SessionTimeout %v, want 12s", got)
	}
}

// TestACL: every node firn creates carries its digest identity's ACL
// alone; a client without the credentials (or with wrong ones) can neither
// change nor delete them, nor create nodes among them.
func TestACL(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	c := cl.Connect(t, sysClock)
	n := coordtest.Node("acl")
	spec := coordtest.Spec("aclgen", 2)
	l := acquire(t, c, spec, n)
	reserve(t, l, 42, n)

	base := cl.Base() + "/aclgen"
	nodes := []string{zktest.Prefix, cl.Base(), base, base + "/pin", base + "/cursor", base + "/owner", base + "/reserved",
		base + "/owner/0-0", base + "/reserved/0-0"}
	want := zk.DigestACL(zk.PermAll, "firn", "zktest-secret")
	for _, p := range nodes {
		acl, _, err := cl.Admin().GetACL(p)
		if err != nil {
			t.Fatalf("GetACL %s: %v", p, err)
		}
		if len(acl) != 1 || acl[0] != want[0] {
			t.Errorf("%s has ACL %+v, want only %+v", p, acl, want)
		}
	}

	for _, who := range []struct{ name, auth string }{{"anonymous", ""}, {"wrong password", "firn:wrong"}} {
		o := zktest.AdminConn(t, b.Servers, who.auth)
		for _, p := range nodes[3:] {
			if _, err := o.Set(p, []byte("999999"), -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s: Set %s: %v, want ErrNoAuth", who.name, p, err)
			}
		}
		for _, p := range []string{base + "/reserved/0-0", base + "/owner/0-0", base + "/pin", base + "/cursor"} {
			if err := o.Delete(p, -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s: Delete %s: %v, want ErrNoAuth", who.name, p, err)
			}
		}
		for _, p := range []string{base + "/owner/0-1", base + "/reserved/0-1", base + "/other"} {
			if _, err := o.Create(p, []byte("1"), 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s: Create %s: %v, want ErrNoAuth", who.name, p, err)
			}
		}
		if _, err := o.SetACL(base+"/reserved/0-0", zk.WorldACL(zk.PermAll), -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s: SetACL: %v, want ErrNoAuth", who.name, err)
		}
	}
	if got := cl.Reserved(t, "aclgen", l.Slot()); got != 42 {
		t.Fatalf("reserved %d, want 42 untouched", got)
	}
	// The same writes with firn's credentials work (the refusals above
	// were the ACL's doing).
	if _, err := cl.Admin().Set(base+"/cursor", []byte("1"), -1); err != nil {
		t.Fatalf("Set with firn's credentials: %v", err)
	}
	reserve(t, l, 43, n)
}

// TestLostReply: the proxy forwards a Reserve's (or Release's, or
// Acquire's) multi and drops its answer, cutting the connection. The
// holder re-reads after reconnecting, finds its owner node and what it
// sent, and keeps the lease; a dropped request is re-sent.
func TestLostReply(t *testing.T) {
	s := zktest.StartStandalone(t)
	b := &zktest.Backend{Servers: []string{s.Addr}, TTL: 4 * time.Second}
	cl := newCluster(t, b)
	p := zktest.NewProxy(t, s.Addr)
	c := cl.ConnectWith(t, sysClock, func(cfg *zookeeper.Config) {
		cfg.Servers = []string{p.Addr()}
	})
	n := coordtest.Node("lossy")
	spec := coordtest.Spec("lost", 2)

	p.DropNextReply(zktest.OpMulti)
	l := acquire(t, c, spec, n)
	if p.Dropped() != 1 {
		t.Fatalf("dropped %d replies, want the acquiring multi's", p.Dropped())
	}
	if want := (coordinator.Slot{Worker: 0}); l.Slot() != want {
		t.Fatalf("acquired %s after a lost answer, want %s (the node the multi created)", l.Slot(), want)
	}
	hs, err := c.Workers(ctxT(t, 10*time.Second), "lost")
	if err != nil {
		t.Fatal(err)
	}
	if live := countLive(hs); live != 1 {
		t.Fatalf("%d live holders after a lost acquisition answer, want 1: %+v", live, hs)
	}
	sess := c.SessionID()

	reserve(t, l, 100, n)
	p.DropNextReply(zktest.OpMulti)
	reserve(t, l, 200, n)
	if p.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2", p.Dropped())
	}
	if got := cl.Reserved(t, "lost", l.Slot()); got != 200 || l.Reserved() != 200 {
		t.Fatalf("after a lost Reserve answer: stored %d, acknowledged %d, want 200", got, l.Reserved())
	}
	p.DropNextRequest(zktest.OpMulti)
	reserve(t, l, 300, n)
	if p.Dropped() != 3 {
		t.Fatalf("dropped %d, want 3", p.Dropped())
	}
	if got := cl.Reserved(t, "lost", l.Slot()); got != 300 {
		t.Fatalf("after a dropped Reserve request: stored %d, want 300", got)
	}
	reserve(t, l, 400, n)
	if isDone(l) || c.SessionID() != sess {
		t.Fatalf("lease done %v, session %#x -> %#x: a lost answer must not cost the lease", isDone(l), sess, c.SessionID())
	}

	p.DropNextReply(zktest.OpMulti)
	if err := l.Release(ctxT(t, 10*time.Second), 350); err != nil {
		t.Fatalf("Release with a lost answer: %v", err)
	}
	if p.Dropped() != 4 {
		t.Fatalf("dropped %d, want 4", p.Dropped())
	}
	if got := cl.Reserved(t, "lost", l.Slot()); got != 350 {
		t.Fatalf("after a lost Release answer: stored %d, want 350", got)
	}
	hs, err = c.Workers(ctxT(t, 10*time.Second), "lost")
	if err != nil {
		t.Fatal(err)
	}
	if live := countLive(hs); live != 0 {
		t.Fatalf("%d live holders after release, want 0", live)
	}
}

// TestWriteWaitsForReconnect: a write whose connection is lost, and whose
// client then finds no server for longer than its rounds would last if
// each were spent at once (eight calls of a second each: the client's
// queue fails at every reconnect, or the call times out), waits for the
// client's next connection and learns its outcome there. Before, the
// rounds ran out while the client was reconnecting ("no outcome after 4
// rounds") — and a client that failed its queue fast enough let them run
// out within a second of a lost answer (TestLostReply failed that way).
func TestWriteWaitsForReconnect(t *testing.T) {
	const partition = 8500 * time.Millisecond // beyond 8 calls of 1 s, within the session timeout
	s := zktest.StartStandalone(t)
	b := &zktest.Backend{Servers: []string{s.Addr}, TTL: 12 * time.Second}
	// cut loses the connection under the next multi (its reply dropped:
	// applied, unanswered) and refuses new connections for partition.
	setup := func(t *testing.T, name string) (*zktest.Cluster, *zktest.Proxy, *zookeeper.Coordinator, coordinator.Lease, coordinator.NodeInfo, func()) {
		cl := newCluster(t, b)
		p := zktest.NewProxy(t, s.Addr)
		c := cl.ConnectWith(t, sysClock, func(cfg *zookeeper.Config) { cfg.Servers = []string{p.Addr()} })
		n := coordtest.Node(name)
		l := acquire(t, c, coordtest.Spec(name, 2), n)
		reserve(t, l, 100, n)
		cut := func() {
			p.Refuse(true)
			p.DropNextReply(zktest.OpMulti)
			time.AfterFunc(partition, func() { p.Refuse(false) })
		}
		return cl, p, c, l, n, cut
	}
	t.Run("reserve", func(t *testing.T) {
		t.Parallel()
		cl, p, c, l, n, cut := setup(t, "waitres")
		sess := c.SessionID()
		cut()
		start := time.Now()
		if err := l.Reserve(ctxT(t, 20*time.Second), 200, beat(n)); err != nil {
			t.Fatalf("Reserve across a lost connection and %v without a server: %v (after %v)", partition, err, time.Since(start).Round(time.Millisecond))
		}
		if p.Dropped() != 1 {
			t.Fatalf("dropped %d replies, want 1", p.Dropped())
		}
		if got := cl.Reserved(t, "waitres", l.Slot()); got != 200 || l.Reserved() != 200 {
			t.Fatalf("stored %d, acknowledged %d, want 200", got, l.Reserved())
		}
		if now := c.SessionID(); isDone(l) || now != sess {
			t.Fatalf("lease done %v, session %#x -> %#x: a partition within the session timeout must not cost the lease", isDone(l), sess, now)
		}
	})
	t.Run("release", func(t *testing.T) {
		t.Parallel()
		cl, p, _, l, _, cut := setup(t, "waitrel")
		cut()
		start := time.Now()
		if err := l.Release(ctxT(t, 20*time.Second), 150); err != nil {
			t.Fatalf("Release across a lost connection and %v without a server: %v (after %v)", partition, err, time.Since(start).Round(time.Millisecond))
		}
		if p.Dropped() != 1 {
			t.Fatalf("dropped %d replies, want 1", p.Dropped())
		}
		if got := cl.Reserved(t, "waitrel", l.Slot()); got != 150 {
			t.Fatalf("stored %d after the release, want 150", got)
		}
		if !isDone(l) {
			t.Fatal("lease not ended by its release")
		}
	})
}

// TestBumpLostReply: a bump whose write is applied and unanswered (the
// connection lost with it) bumps once: it reads the node back on the
// client's next connection before writing again. Before, the read was
// sent while the client reconnected and failed: the generator floor's
// write ended the bump "read generator floor: no answer in time", and a
// reservation's was followed by a second bump of the bumped value (by
// twice By).
func TestBumpLostReply(t *testing.T) {
	s := zktest.StartStandalone(t)
	b := &zktest.Backend{Servers: []string{s.Addr}, TTL: 4 * time.Second}
	for _, tc := range []struct {
		name string
		skip int // SetData requests answered before the one whose reply is lost
	}{{"floor", 0}, {"reservation", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCluster(t, b)
			holder := cl.Connect(t, sysClock)
			n := coordtest.Node("bumped")
			spec := coordtest.Spec("bumped", 2)
			l := acquire(t, holder, spec, n)
			reserve(t, l, 100, n)
			if err := l.Release(ctxT(t, 10*time.Second), 100); err != nil {
				t.Fatal(err)
			}
			p := zktest.NewProxy(t, s.Addr)
			admin := cl.ConnectWith(t, sysClock, func(cfg *zookeeper.Config) { cfg.Servers = []string{p.Addr()} })
			p.DropReplyAfter(zktest.OpSetData, tc.skip) // the floor's write is the first, the reservation's the second
			res, err := admin.Bump(ctxT(t, 20*time.Second), coordinator.BumpSpec{Generator: spec.Generator, By: 10, MaxTime: 1 << 50})
			if err != nil {
				t.Fatalf("Bump with the %s write's answer lost: %v", tc.name, err)
			}
			if p.Dropped() != 1 {
				t.Fatalf("dropped %d replies, want the %s write's", p.Dropped(), tc.name)
			}
			if got := cl.Reserved(t, spec.Generator, l.Slot()); got != 110 || res.Floor != 110 {
				t.Fatalf("after a bump by 10 of 100 with the %s write's answer lost: reservation %d, floor %d; want 110 and 110", tc.name, got, res.Floor)
			}
		})
	}
}

// TestForceReleaseLostReply: a force-release whose multi is applied and
// unanswered (the connection lost with it) reads the slot back on the
// client's next connection and reports it freed. Before, the read was
// sent while the client reconnected and failed ("read reservation").
func TestForceReleaseLostReply(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	holder := cl.Connect(t, sysClock)
	n := coordtest.Node("forced")
	spec := coordtest.Spec("forced", 2)
	l := acquire(t, holder, spec, n)
	reserve(t, l, 100, n)
	p := zktest.NewProxy(t, b.Servers[0])
	admin := cl.ConnectWith(t, sysClock, func(cfg *zookeeper.Config) { cfg.Servers = []string{p.Addr()} })
	p.DropNextReply(zktest.OpMulti)
	if err := admin.ForceRelease(ctxT(t, 20*time.Second), spec.Generator, l.Slot()); err != nil {
		t.Fatalf("ForceRelease with a lost answer: %v", err)
	}
	if p.Dropped() != 1 {
		t.Fatalf("dropped %d replies, want the force-release's", p.Dropped())
	}
	hs, err := admin.Workers(ctxT(t, 10*time.Second), spec.Generator)
	if err != nil {
		t.Fatal(err)
	}
	if live := countLive(hs); live != 0 {
		t.Fatalf("%d live holders after the force-release, want 0: %+v", live, hs)
	}
	if got := cl.Reserved(t, spec.Generator, l.Slot()); got != 100 {
		t.Fatalf("reservation %d after the force-release, want 100 (kept)", got)
	}
}

func countLive(hs []coordinator.SlotState) int {
	n := 0
	for _, h := range hs {
		if h.Live {
			n++
		}
	}
	return n
}

// TestConnectionLossKeepsLease: a partition between the holder and its
// only server, shorter than the session timeout, fails calls in time
// (ErrUnavailable, never ErrLeaseLost) and keeps the session and the lease.
func TestConnectionLossKeepsLease(t *testing.T) {
	s := zktest.StartStandalone(t)
	b := &zktest.Backend{Servers: []string{s.Addr}, TTL: 4 * time.Second}
	cl := newCluster(t, b)
	p := zktest.NewProxy(t, s.Addr)
	c := cl.ConnectWith(t, sysClock, func(cfg *zookeeper.Config) { cfg.Servers = []string{p.Addr()} })
	n := coordtest.Node("cut")
	l := acquire(t, c, coordtest.Spec("cut", 1), n)
	reserve(t, l, 10, n)
	sess := c.SessionID()

	p.Refuse(true)
	p.Sever()
	start := time.Now()
	err := l.Reserve(ctxT(t, 1500*time.Millisecond), 20, beat(n))
	if !errors.Is(err, coordinator.ErrUnavailable) || errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Reserve during the partition: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Reserve during the partition took %v, want it bounded by its context", d)
	}
	if l.Reserved() != 10 {
		t.Fatalf("Reserved() = %d after a failed Reserve, want 10", l.Reserved())
	}
	time.Sleep(time.Second) // the partition lasts ~2.5 s of a 4 s session
	p.Refuse(false)
	reserve(t, l, 30, n)
	if isDone(l) || c.SessionID() != sess {
		t.Fatalf("after the partition: done %v, session %#x -> %#x", isDone(l), sess, c.SessionID())
	}
	if got := cl.Reserved(t, "cut", l.Slot()); got != 30 {
		t.Fatalf("stored %d, want 30", got)
	}
}

// TestFrozenServerFailover: the server a holder is connected to is frozen
// (SIGSTOP) past the session timeout; the client fails over to another
// member of the ensemble within the window, keeps its session, and its
// lease never reports a loss.
func TestFrozenServerFailover(t *testing.T) {
	b, e := ensemble(t)
	cl := newCluster(t, b)
	n := coordtest.Node("failover")
	var c *zookeeper.Coordinator
	var frozen *zktest.Server
	for i := 0; i < 20 && frozen == nil; i++ {
		cc := cl.ConnectWith(t, sysClock, nil)
		srv := e.ByAddr(cc.Conn().Server())
		if m, err := srv.Mode(); err == nil && m == "follower" {
			c, frozen = cc, srv
			break
		}
		cc.Close()
	}
	if frozen == nil {
		t.Fatal("never connected to a follower")
	}
	l := acquire(t, c, coordtest.Spec("failover", 1), n)
	reserve(t, l, 1, n)
	sess := c.SessionID()
	frozen.Freeze()
	defer frozen.Thaw()
	deadline := time.Now().Add(cl.TTL() + 2*time.Second)
	until, oks := int64(2), 0
	var firstOK time.Duration
	start := time.Now()
	for time.Now().Before(deadline) {
		err := l.Reserve(ctxT(t, 2*time.Second), until, beat(n))
		switch {
		case err == nil:
			oks++
			if firstOK == 0 {
				firstOK = time.Since(start)
			}
			until++
		case errors.Is(err, coordinator.ErrLeaseLost):
			t.Fatalf("lease lost while its server was frozen: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if oks == 0 {
		t.Fatal("no Reserve succeeded while the server was frozen: no failover")
	}
	if c.Conn().Server() == frozen.Addr || c.SessionID() != sess || isDone(l) {
		t.Fatalf("server %s (frozen %s), session %#x -> %#x, done %v", c.Conn().Server(), frozen.Addr, sess, c.SessionID(), isDone(l))
	}
	if w := coordinator.MinWindow(zookeeper.SessionStall(c.SessionTimeout())); firstOK > w {
		t.Fatalf("first Reserve after the freeze succeeded after %v, beyond the window bound %v", firstOK, w)
	}
	t.Logf("first Reserve after the freeze: %v; %d succeeded", firstOK, oks)
}

// TestSessionExpiry: the only server frozen past the session timeout
// expires the session when it resumes (the client cannot reach it until
// then): the lease ends, Reserve and Release
// fail with ErrLeaseLost, and a new acquisition (a new owner node in a new
// session, never the old one re-created) starts above the old reservation.
func TestSessionExpiry(t *testing.T) {
	s := zktest.StartStandalone(t)
	b := &zktest.Backend{Servers: []string{s.Addr}, TTL: standaloneTTL}
	cl := newCluster(t, b)
	p := zktest.NewProxy(t, s.Addr)
	c := cl.ConnectWith(t, sysClock, func(cfg *zookeeper.Config) { cfg.Servers = []string{p.Addr()} })
	n := coordtest.Node("expiring")
	spec := coordtest.Spec("expiry", 1)
	l := acquire(t, c, spec, n)
	reserve(t, l, 500, n)
	old := c.SessionID()

	// The client is kept away until the resumed server has run its session
	// tracker: a reconnect racing the tracker could revive the session.
	s.Freeze()
	p.Refuse(true)
	p.Sever()
	time.Sleep(cl.TTL() + 2*time.Second)
	s.Thaw()
	time.Sleep(2 * time.Second)
	p.Refuse(false)
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("lease not done after the session expired")
	}
	if l.Ctx().Err() == nil {
		t.Fatal("Done closed but Ctx not cancelled")
	}
	if err := l.Reserve(ctxT(t, 5*time.Second), 600, beat(n)); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Reserve after expiry: %v, want ErrLeaseLost", err)
	}
	if err := l.Release(ctxT(t, 5*time.Second), 400); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Release after expiry: %v, want ErrLeaseLost", err)
	}
	if got := cl.Reserved(t, "expiry", l.Slot()); got != 500 {
		t.Fatalf("reserved %d, want 500", got)
	}
	l2 := acquire(t, c, spec, n)
	if l2.Floor() < 500 || c.SessionID() == old || c.SessionID() == 0 {
		t.Fatalf("re-acquired with Floor %d in session %#x (old %#x)", l2.Floor(), c.SessionID(), old)
	}
	_, st, err := cl.Admin().Get(cl.Base() + "/expiry/owner/0-0")
	if err != nil || st.EphemeralOwner != c.SessionID() {
		t.Fatalf("owner node: %v, ephemeral owner %#x, want the new session %#x", err, st.EphemeralOwner, c.SessionID())
	}
	reserve(t, l2, 700, n)
}

// TestFenceStaleSessionTakeBack: a node's previous process is alive (its
// session is open) but silent; a restart with the same instance ID, whose
// clock sees the heartbeat older than TakeBackAge, takes the worker back
// through the fence. Every write of the old session then fails, although
// that session never expired. A weak fence (bare owner version check, a
// take-back that reuses the old owner node) lets the old process write.
func TestFenceStaleSessionTakeBack(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	oldc := cl.ConnectWith(t, sysClock, nil)
	n := coordtest.Node("restarted")
	spec := coordtest.Spec("stale", 1)
	lo := acquire(t, oldc, spec, n)
	for _, r := range []int64{100, 200, 300} {
		reserve(t, lo, r, n)
	}
	oldSess := oldc.SessionID()

	newc := cl.ConnectWith(t, clockguard.NewOffset(sysClock, coordinator.TakeBackAge+time.Second), nil)
	ln := acquire(t, newc, spec, n)
	if ln.Slot() != lo.Slot() || ln.ReadReserved() != 300 || ln.Floor() < 300 {
		t.Fatalf("take-back: slot %s ReadReserved %d Floor %d, want %s 300 >=300", ln.Slot(), ln.ReadReserved(), ln.Floor(), lo.Slot())
	}
	if err := lo.Reserve(ctxT(t, 10*time.Second), 5000, beat(n)); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("old session's Reserve after the take-back: %v, want ErrLeaseLost", err)
	}
	if err := lo.Release(ctxT(t, 10*time.Second), 0); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("old session's Release after the take-back: %v, want ErrLeaseLost", err)
	}
	if got := cl.Reserved(t, "stale", lo.Slot()); got != 300 {
		t.Fatalf("reserved %d, want 300 (nothing from the old session)", got)
	}
	if oldc.SessionID() != oldSess {
		t.Fatalf("old session changed %#x -> %#x: the test needs it alive", oldSess, oldc.SessionID())
	}
	reserve(t, ln, 400, n)
	if got := cl.Reserved(t, "stale", ln.Slot()); got != 400 {
		t.Fatalf("reserved %d, want 400", got)
	}
}

// raceAcquisition makes slow's next acquisition run race (once) between
// its read of a candidate's reservation and its acquiring multi.
func raceAcquisition(t *testing.T, slow *zookeeper.Coordinator, race func() error) *error {
	var once sync.Once
	var raceErr error
	zookeeper.SetAfterRead(slow, func(coordinator.Slot) { once.Do(func() { raceErr = race() }) })
	t.Cleanup(func() { zookeeper.SetAfterRead(slow, nil) })
	return &raceErr
}

// TestFenceAcquireRereadsReservation: between a taker's read of a free
// slot's reservation and its acquiring multi, the reservation is raised
// (by an operator's bump). The multi's exact-version setData on the
// reservation fails, the taker reads again and starts above the raised
// value; without that fence it would start at the stale one.
func TestFenceAcquireRereadsReservation(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	slow, fast := cl.ConnectWith(t, sysClock, nil), cl.ConnectWith(t, sysClock, nil)
	spec := coordtest.Spec("reread", 1)
	nf := coordtest.Node("fast")
	l0 := acquire(t, fast, spec, nf)
	reserve(t, l0, 100, nf)
	if err := l0.Release(ctxT(t, 10*time.Second), 100); err != nil {
		t.Fatal(err)
	}
	// The race writes the reservation alone (the per-slot half of a bump):
	// a whole Bump also raises the generator floor, whose version check
	// would catch the race even under the weak fence.
	raceErr := raceAcquisition(t, slow, func() error { cl.SetReserved(t, "reread", l0.Slot(), 1100); return nil })
	ls := acquire(t, slow, spec, coordtest.Node("slow"))
	if *raceErr != nil {
		t.Fatalf("the racing bump: %v", *raceErr)
	}
	if got := cl.Reserved(t, "reread", ls.Slot()); got != 1100 {
		t.Fatalf("reserved %d after the bump, want 1100", got)
	}
	if ls.ReadReserved() != 1100 || ls.Floor() < 1100 {
		t.Fatalf("taker read R %d, Floor %d; the reservation was 1100 when it took the slot", ls.ReadReserved(), ls.Floor())
	}
}

// TestAcquireRacingHolder: between a taker's read and its multi, another
// node takes the slot, reserves further and releases it; the taker starts
// above what that node used.
func TestAcquireRacingHolder(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	slow, fast := cl.ConnectWith(t, sysClock, nil), cl.ConnectWith(t, sysClock, nil)
	spec := coordtest.Spec("racing", 1)
	nf := coordtest.Node("fast")
	l0 := acquire(t, fast, spec, nf)
	reserve(t, l0, 100, nf)
	if err := l0.Release(ctxT(t, 10*time.Second), 100); err != nil {
		t.Fatal(err)
	}
	raceErr := raceAcquisition(t, slow, func() error {
		l, err := fast.Acquire(ctxT(t, 10*time.Second), spec, nf)
		if err == nil {
			err = l.Reserve(ctxT(t, 10*time.Second), 300, beat(nf))
		}
		if err == nil {
			err = l.Release(ctxT(t, 10*time.Second), 250)
		}
		return err
	})
	ls := acquire(t, slow, spec, coordtest.Node("slow"))
	if *raceErr != nil {
		t.Fatalf("the racing holder: %v", *raceErr)
	}
	if ls.ReadReserved() != 250 || ls.Floor() < 250 {
		t.Fatalf("taker read R %d, Floor %d; the racing holder used up to 250", ls.ReadReserved(), ls.Floor())
	}
}

// TestAbandonLingers: an abandoned coordinator (a crash) sends no close,
// so its owner node lingers until the session times out, then goes.
func TestAbandonLingers(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	c := cl.ConnectWith(t, sysClock, nil)
	l := acquire(t, c, coordtest.Spec("abandon", 1), coordtest.Node("crash"))
	start := time.Now()
	c.Abandon()
	path := fmt.Sprintf("%s/abandon/owner/%d-%d", cl.Base(), l.Datacenter(), l.WorkerID())
	if ok, _, err := cl.Admin().Exists(path); err != nil || !ok {
		t.Fatalf("owner node gone at once after a crash: %v %v", ok, err)
	}
	for {
		ok, _, err := cl.Admin().Exists(path)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Since(start) > 3*cl.TTL() {
			t.Fatalf("owner node still there %v after the crash", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d := time.Since(start); d < cl.TTL()/2 {
		t.Fatalf("owner node went after %v, before the session timeout %v could run out", d, cl.TTL())
	}
	if !isDone(l) {
		t.Fatal("abandoned coordinator's lease not done")
	}
}

// TestFrozenLeader: the ensemble's leader is frozen past the session
// timeout. The followers elect a new leader; the holder's client (bounded
// handshakes: it cannot hang on the frozen process) reconnects in time,
// keeps its session, and its lease never reports a loss.
func TestFrozenLeader(t *testing.T) {
	b, e := ensemble(t)
	cl := newCluster(t, b)
	c := cl.ConnectWith(t, sysClock, nil)
	n := coordtest.Node("leaderless")
	l := acquire(t, c, coordtest.Spec("leader", 1), n)
	reserve(t, l, 1, n)
	sess := c.SessionID()
	leader, err := e.Leader()
	if err != nil {
		t.Fatal(err)
	}
	leader.Freeze()
	defer leader.Thaw()
	deadline := time.Now().Add(cl.TTL() + 4*time.Second)
	until, oks := int64(2), 0
	for time.Now().Before(deadline) {
		err := l.Reserve(ctxT(t, 2*time.Second), until, beat(n))
		switch {
		case err == nil:
			oks++
			until++
		case errors.Is(err, coordinator.ErrLeaseLost):
			t.Fatalf("lease lost while the leader was frozen: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if oks == 0 {
		t.Fatal("no Reserve succeeded while the leader was frozen")
	}
	if c.SessionID() != sess || isDone(l) {
		t.Fatalf("session %#x -> %#x, done %v", sess, c.SessionID(), isDone(l))
	}
	leader.Thaw()
	reserve(t, l, until, n)
}

// TestTakeBackHitsOnlyTheStaleRecord: a take-back replaces this
// instance's own stale owner record and no other. Between the taker's scan
// and its multi, the stale record's process lets the worker go and
// another node takes it and writes as often as the old record had been
// written: its owner node, created anew, has the version the scan read.
// The take-back deleted it at that version (re-reading only the
// reservation), ending the live holder's lease and taking its worker; it
// must find the record changed (its creation zxid) and move on.
func TestTakeBackHitsOnlyTheStaleRecord(t *testing.T) {
	cl := newCluster(t, standalone(t))
	spec := coordtest.Spec("tb", 1)
	me := coordtest.Node("me")
	other := coordtest.Node("other")
	const writes = 3

	x := cl.Connect(t, sysClock) // an old process of this instance
	lx := acquire(t, x, spec, me)
	for i := 1; i <= writes; i++ {
		reserve(t, lx, int64(100*i), me)
	}
	// The taker's clock reads a minute later: x's record looks stale.
	y := cl.ConnectWith(t, clockguard.NewFake(time.Now().Add(time.Minute)), nil)
	z := cl.Connect(t, sysClock)
	var lz coordinator.Lease
	var once sync.Once
	zookeeper.SetAfterRead(y, func(coordinator.Slot) {
		once.Do(func() {
			if err := lx.Release(ctxT(t, 10*time.Second), 300); err != nil {
				t.Errorf("release x: %v", err)
				return
			}
			lz = acquire(t, z, spec, other)
			for i := 1; i <= writes; i++ {
				reserve(t, lz, int64(300+100*i), other)
			}
		})
	})
	ly, err := y.Acquire(ctxT(t, 20*time.Second), spec, me)
	if lz == nil {
		t.Fatalf("the other node never took the worker (y: %v)", err)
	}
	if err == nil {
		t.Errorf("y took %s (floor %d) back from a record that was not its own", ly.Slot(), ly.Floor())
	} else if !errors.Is(err, coordinator.ErrExhausted) {
		t.Errorf("y's Acquire with the one worker held by another node: %v, want ErrExhausted", err)
	}
	if rerr := lz.Reserve(ctxT(t, 10*time.Second), 1000, beat(other)); rerr != nil {
		t.Fatalf("the live holder of another node lost its worker to a take-back aimed at a stale record of instance %q: Reserve: %v",
			me.InstanceID, rerr)
	}
}
