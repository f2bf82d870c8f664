package zookeeper_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/zktest"
	"github.com/firnid/firn/segment"
)

// blackhole is a raw TCP proxy (the quorum protocol has no client
// framing) that, once stalled, forwards nothing more and accepts no new
// connection, keeping the open ones open: a partition that neither side
// learns of until its own read timeout, as a cut network cable.
type blackhole struct {
	ln      net.Listener
	target  string
	stalled atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if b.stalled.Load() {
				c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, c, s)
			b.mu.Unlock()
			go b.pipe(c, s)
			go b.pipe(s, c)
		}
	}()
	return b
}

func (b *blackhole) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !b.stalled.Load() {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

// TestAssuredEndsWithTheSessionOnACutOffFollower: a holder's client is
// connected to a follower that a partition cuts off from the leader (the
// follower learns of it only after syncLimit × tickTime, 2.5 s here, and
// answers reads from its own copy until then). The leader hears nothing
// more of the session and expires it a session timeout after the cut;
// another node then takes the slot. The old holder's lease must not be
// assured at that moment (Lease.Assured: a sequence section's owner
// answers while it is, and two owners answering one section break the
// order of its keys), yet the follower's answers to reads sent after the
// cut counted as the session's renewal; and a write the leader answered
// just before the cut, counted from its send time as if the leader had
// touched the session then, kept it assured past the expiry by up to half
// a tick.
func TestAssuredEndsWithTheSessionOnACutOffFollower(t *testing.T) {
	e, _, f, rest, bh := cutOffFollower(t)

	b := &zktest.Backend{Servers: e.Addrs(), TTL: ensembleTTL}
	cl := newCluster(t, b)
	old := cl.ConnectWith(t, sysClock, func(c *zookeeper.Config) { c.Servers = []string{f.Addr} })
	other := cl.ConnectWith(t, sysClock, func(c *zookeeper.Config) { c.Servers = rest })
	spec := coordtest.Spec("cut", 1)
	n := coordtest.Node("old")
	l := acquire(t, old, spec, n)
	reserve(t, l, 1, n)

	// The old holder keeps reading (as a sequence node does every 200 ms).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_, _ = old.Workers(ctx, "cut")
			cancel()
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(500 * time.Millisecond)

	// A write answered just before the cut: the leader answered it, but
	// hears of the session's activity only in the follower's next ping
	// reply, which the cut stops (assuredSpan).
	reserve(t, l, 2, n)
	bh.stalled.Store(true) // the follower is cut off from the leader
	cut := time.Now()
	deadline := cut.Add(6 * ensembleTTL)
	for {
		nl, err := other.Acquire(ctxT(t, 2*time.Second), spec, coordtest.Node("new"))
		if err == nil {
			a := l.Assured()
			t.Logf("another node took the slot %v after the cut; the old holder's lease is assured for %v more", time.Since(cut).Round(time.Millisecond), a)
			if a > 0 {
				t.Fatalf("the leader expired the old holder's session and another node took its slot (%s), yet the old lease is still assured for %v: its reads, answered by a follower cut off from the leader, counted as renewals, or its last write counted from its send time, though the leader hears of it only at the follower's next ping",
					nl.Slot(), a.Round(time.Millisecond))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not taken within %v of the cut: %v", 6*ensembleTTL, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cutOffFollower starts a 3-server ensemble in which one follower, f,
// reaches the leader through bh: bh.stalled cuts f off from the leader
// (and rest, the other servers' client addresses, keep the quorum).
func cutOffFollower(t *testing.T) (*zktest.Ensemble, *zktest.Server, *zktest.Server, []string, *blackhole) {
	t.Helper()
	e := zktest.StartEnsemble(t, 3)
	leader, err := e.Leader()
	if err != nil {
		t.Fatal(err)
	}
	var f *zktest.Server
	var rest []string
	for _, s := range e.Servers {
		if s != leader && f == nil {
			f = s
			continue
		}
		rest = append(rest, s.Addr)
	}
	q, err := f.PeerQuorumAddr(leader.ID)
	if err != nil {
		t.Fatal(err)
	}
	bh := newBlackhole(t, q)
	f.Kill()
	if err := f.RoutePeer(leader.ID, bh.addr()); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	if m, err := f.Mode(); err != nil || m != "follower" {
		t.Fatalf("server %d after its restart: mode %q, %v", f.ID, m, err)
	}
	if l2, err := e.Leader(); err != nil || l2 != leader {
		t.Fatalf("the leader moved: %v", err)
	}
	return e, leader, f, rest, bh
}

// TestCounterReadAfterMarkerOnACutOffFollower: a segment claim's
// confirming read (docs/design.md, "A claim settles before use") must find
// a restore marker another node wrote before the read began: that is
// what stops a claim made on a restored counter from being handed out.
// The claimer's client is connected to a follower that a partition has
// cut off from the leader; the follower answers reads from its own copy
// until syncLimit × tickTime (2.5 s here; 10 s with ZooKeeper's default
// tickTime of 2 s, longer than the 2 s settle) has passed without word of
// the leader. The marker, written through the leader and acknowledged,
// must refuse the claimer's read that begins after it.
func TestCounterReadAfterMarkerOnACutOffFollower(t *testing.T) {
	e, _, f, rest, bh := cutOffFollower(t)
	b := &zktest.Backend{Servers: e.Addrs(), TTL: ensembleTTL}
	cl := newCluster(t, b)
	claimer := cl.ConnectWith(t, sysClock, func(c *zookeeper.Config) { c.Servers = []string{f.Addr} })
	witness := cl.ConnectWith(t, sysClock, func(c *zookeeper.Config) { c.Servers = rest })
	spec := coordtest.CounterSpec("confirm", 1, segment.MaxID)
	claim, err := coordinator.ClaimSegment(ctxT(t, 10*time.Second), claimer, spec, 1000, 0, segment.Mark{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	known := claim.Record.State.Mark()

	bh.stalled.Store(true) // the follower is cut off from the leader
	rb := &coordinator.CounterRolledBackError{Generator: spec.Generator, Seen: segment.Counter{Next: 1},
		Known: known, Cause: segment.ErrForked}
	ev := rb.Evidence(coordtest.Node("witness"), time.Now())
	if err := witness.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatal(err)
	}
	// The claim's confirming read, begun after the marker was acknowledged.
	rec, err := coordinator.ReadFollowing(ctxT(t, 10*time.Second), claimer, spec, known)
	if err == nil && rec.State.Holds(known) {
		t.Fatalf("the confirming read, begun after another node's restore marker was acknowledged, found no marker and still the claim's write (seq %d): the claim's IDs %v would be handed out",
			known.Seq, claim.Range)
	}
	t.Logf("the confirming read after the marker: %v", err)
}
