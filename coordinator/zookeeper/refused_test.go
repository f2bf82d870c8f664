package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/zktest"
)

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v %s", from, to, err, out)
	}
}

// copyData copies the data dir of s, stopped for the copy and started
// again, and returns the copy's path.
func copyData(t *testing.T, s *zktest.Server) string {
	t.Helper()
	old := filepath.Join(t.TempDir(), "zk-data-copy")
	s.Kill()
	copyTree(t, s.DataDir(), old)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return old
}

// restoreData kills s, puts the copy old in place of its data dir and
// starts it.
func restoreData(t *testing.T, s *zktest.Server, old string) {
	t.Helper()
	s.Kill()
	if err := os.RemoveAll(s.DataDir()); err != nil {
		t.Fatal(err)
	}
	copyTree(t, old, s.DataDir())
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
}

// reserveAgain reserves r once the restarted server lets the client back
// into its session (which the server restores from its data).
func reserveAgain(t *testing.T, l coordinator.Lease, n coordinator.NodeInfo, r int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := l.Reserve(ctxT(t, 5*time.Second), r, beat(n))
		if err == nil {
			return
		}
		if errors.Is(err, coordinator.ErrLeaseLost) || time.Now().After(deadline) {
			t.Fatalf("Reserve(%d) after the server came back: %v", r, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRestoredServerBehindClient: a standalone server restored from an
// older copy of its data directory has a last zxid below the one the
// client has seen, and refuses every reconnect of that client (it closes
// the connection without answering the connect request). Once that has
// lasted about a session timeout the coordinator gives its client up: the
// leases of the old session end (Done, ErrLeaseLost), a new client opens a
// new session, and an acquisition on the same coordinator shows the
// reservation as the older copy stored it — below what the lease had
// acknowledged. The watches behind Peers work on the new client.
func TestRestoredServerBehindClient(t *testing.T) {
	s := zktest.StartStandalone(t)
	b := &zktest.Backend{Servers: []string{s.Addr}, TTL: standaloneTTL}
	cl := newCluster(t, b)
	before := goleak.IgnoreCurrent()
	c := cl.ConnectWith(t, sysClock, nil)
	n := coordtest.Node("restored")
	// Two workers: the restored cursor points past the held one, which
	// is taken again all the same.
	spec := coordtest.Spec("restored", 2)
	l := acquire(t, c, spec, n)
	reserve(t, l, 1000, n)
	if _, err := c.Peers(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}

	// The copy, taken while the server is stopped.
	old := copyData(t, s)
	copied, err := s.Zxid()
	if err != nil {
		t.Fatal(err)
	}

	// More writes: the client's zxid moves past the copy's.
	reserveAgain(t, l, n, 2000)
	for r := int64(2100); r <= 3000; r += 100 {
		reserve(t, l, r, n)
	}
	seen, err := s.Zxid()
	if err != nil {
		t.Fatal(err)
	}
	acked := l.Reserved()
	sess := c.SessionID()
	t.Logf("copy at zxid %#x, client has seen up to %#x, acknowledged %d in session %#x", copied, seen, acked, sess)

	// Calls keep coming while the client is refused and replaced: each
	// fails as unavailable or succeeds.
	stopCalls := make(chan struct{})
	endCalls := sync.OnceFunc(func() { close(stopCalls) })
	t.Cleanup(endCalls)
	callsDone := make(chan error, 1)
	go func() {
		var bad error
		defer func() { callsDone <- bad }()
		for {
			select {
			case <-stopCalls:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := c.Workers(ctx, spec.Generator)
			cancel()
			if err != nil && !errors.Is(err, coordinator.ErrUnavailable) && bad == nil {
				bad = err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The restore.
	restoreData(t, s, old)
	back := time.Now()
	if z, err := s.Zxid(); err != nil || z >= seen {
		t.Fatalf("restored server at zxid %#x (%v), want below %#x", z, err, seen)
	}

	bound := c.SessionTimeout() + 10*time.Second
	select {
	case <-l.Done():
		t.Logf("old lease ended %v after the restored server came back", time.Since(back).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("old lease still not done %v after the restored server came back (session %#x)\nserver log:\n%s",
			bound, c.SessionID(), s.LogTail(15))
	}
	if l.Ctx().Err() == nil {
		t.Fatal("Done closed but Ctx not cancelled")
	}
	if err := l.Reserve(ctxT(t, 5*time.Second), acked+100, beat(n)); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Reserve on the old lease: %v, want ErrLeaseLost", err)
	}
	if err := l.Release(ctxT(t, 5*time.Second), acked); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Release on the old lease: %v, want ErrLeaseLost", err)
	}

	// A new acquisition on the same coordinator, in a new session. The
	// old session's owner node came back with the copy; it goes when the
	// restored server expires that session, or is taken back as ours.
	// The hook makes the two race: a take-back's multi is sent only once
	// the server has expired the old session, so that it fails. Either
	// way the old slot is what the coordinator takes, not the free one
	// the copy's cursor points at: a node on the free one would never
	// compare what it acknowledged with what the copy shows.
	ownerPath := fmt.Sprintf("%s/%s/owner/%d-%d", cl.Base(), spec.Generator, l.Slot().Datacenter, l.Slot().Worker)
	var raced atomic.Bool
	zookeeper.SetAfterRead(c, func(slot coordinator.Slot) {
		if slot != l.Slot() || raced.Swap(true) {
			return
		}
		for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if there, _, err := cl.Admin().Exists(ownerPath); err == nil && !there {
				return
			}
		}
	})
	var l2 coordinator.Lease
	ctx, cancel := context.WithTimeout(context.Background(), bound+10*time.Second)
	defer cancel()
	for {
		l2, err = c.Acquire(ctx, spec, n)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no acquisition on the same coordinator %v after the restored server came back: %v",
				time.Since(back).Round(time.Millisecond), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	endCalls()
	if err := <-callsDone; err != nil {
		t.Fatalf("a call during the client's replacement: %v, want ErrUnavailable or success", err)
	}
	t.Logf("acquired again %v after the restored server came back, session %#x -> %#x, reservation read %d (acknowledged %d)",
		time.Since(back).Round(time.Millisecond), sess, c.SessionID(), l2.ReadReserved(), acked)
	if c.SessionID() == sess || c.SessionID() == 0 {
		t.Fatalf("session %#x after the new client, old %#x", c.SessionID(), sess)
	}
	if got, _ := zookeeper.SessionOf(l2); got != c.SessionID() {
		t.Fatalf("new lease in session %#x, coordinator's session %#x", got, c.SessionID())
	}
	// The old slot, showing the copy's reservation, below what was
	// acknowledged.
	if l2.Slot() != l.Slot() || l2.ReadReserved() != 1000 || l2.ReadReserved() >= acked {
		t.Fatalf("new lease on %s reads reservation %d; want the old slot %s showing the copy's 1000, below the acknowledged %d (a take-back raced with the expiry: %v)",
			l2.Slot(), l2.ReadReserved(), l.Slot(), acked, raced.Load())
	}
	reserve(t, l2, acked+1000, n)

	// The watches behind Peers follow the new client: a heartbeat written
	// by another coordinator is seen.
	other := cl.Connect(t, sysClock)
	on := coordtest.Node("peer")
	ol := acquire(t, other, coordtest.Spec("peerwatch", 2), on)
	waitPeer(t, c, "peerwatch", ol, on, 15*time.Second, "Peers after the new client never reported the peer's heartbeat")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !isDone(l2) {
		t.Fatal("new lease not done after Close")
	}
	// Neither client of c leaves a goroutine behind (nor its watches or
	// given-up calls); the others are closed first.
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	cl.Admin().Close()
	goleak.VerifyNone(t, before,
		// The restarted server's process waiter.
		goleak.IgnoreAnyFunction("github.com/firnid/firn/internal/testing/zktest.(*Server).launch.func1"))
}

// TestGivenUpSessionWorkerTakenAgain: a client given up (redial) leaves
// its session's owner nodes on the servers until they expire that
// session. Meanwhile the coordinator takes no free worker: its next
// acquisition waits for the owner node to go and takes the old worker
// again, reading the reservation the node compares with what it
// acknowledged.
func TestGivenUpSessionWorkerTakenAgain(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.ConnectWith(t, sysClock, nil)
	n := coordtest.Node("givenup")
	spec := coordtest.Spec("givenup", 2)
	l := acquire(t, c, spec, n)
	reserve(t, l, 1000, n)
	old := c.SessionID()
	zookeeper.GiveUpClient(c)
	if !isDone(l) {
		t.Fatal("lease of the given-up session not done")
	}
	ownerPath := fmt.Sprintf("%s/%s/owner/%d-%d", cl.Base(), spec.Generator, l.Slot().Datacenter, l.Slot().Worker)
	if there, _, err := cl.Admin().Exists(ownerPath); err != nil || !there {
		t.Fatalf("owner node of the given-up session %#x: exists %v (%v), want it kept by the server until the session expires", old, there, err)
	}
	// Each attempt meanwhile is refused at once, naming the wait (the
	// holder's loop tries again); none takes the free worker.
	start := time.Now()
	var l2 coordinator.Lease
	for deadline := start.Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if l2, err = c.Acquire(ctxT(t, 10*time.Second), spec, n); err == nil {
			break
		}
		if !errors.Is(err, coordinator.ErrEndedWaiting) || time.Now().After(deadline) {
			t.Fatalf("acquisition while the given-up session's owner node stands: %v, want ErrEndedWaiting until it goes", err)
		}
	}
	t.Logf("acquired %s %v after the client was given up (session %#x -> %#x)", l2.Slot(), time.Since(start).Round(time.Millisecond), old, c.SessionID())
	if l2.Slot() != l.Slot() || l2.ReadReserved() != 1000 {
		t.Fatalf("after the client was given up the coordinator took %s reading reservation %d; want its old %s reading 1000",
			l2.Slot(), l2.ReadReserved(), l.Slot())
	}
}

// TestFrozenServerKeepsClient: a frozen server (SIGSTOP: the kernel still
// completes the TCP handshakes, the connect requests go unanswered until
// the reads time out) is never taken for one that refuses the client.
// Frozen for less than the session timeout, the session and the lease
// survive; frozen past it, the session expires on the server's own terms
// when it resumes and the same client opens the new session by itself —
// or the server, taking the client's queued reconnect before its expirer
// runs, keeps the session, and the lease lives on.
func TestFrozenServerKeepsClient(t *testing.T) {
	s := zktest.StartStandalone(t)
	b := &zktest.Backend{Servers: []string{s.Addr}, TTL: standaloneTTL}
	cl := newCluster(t, b)
	c := cl.ConnectWith(t, sysClock, nil)
	client := c.Conn()
	n := coordtest.Node("frozen")
	spec := coordtest.Spec("frozen", 2)
	l := acquire(t, c, spec, n)
	reserve(t, l, 100, n)
	sess := c.SessionID()

	s.Freeze()
	time.Sleep(c.SessionTimeout() / 2)
	s.Thaw()
	reserveAgain(t, l, n, 200)
	if isDone(l) || c.SessionID() != sess || c.Conn() != client {
		t.Fatalf("after a short freeze: done %v, session %#x -> %#x, client replaced %v",
			isDone(l), sess, c.SessionID(), c.Conn() != client)
	}

	// Long enough for several unanswered connect requests over more than
	// a session timeout.
	s.Freeze()
	time.Sleep(3 * c.SessionTimeout())
	s.Thaw()
	select {
	case <-l.Done():
		// The server expired the session when it resumed: the same
		// client opens the new one.
		l2 := acquire(t, c, spec, n)
		if got, _ := zookeeper.SessionOf(l2); got == sess || got != c.SessionID() {
			t.Fatalf("new lease in session %#x, old %#x, coordinator's %#x", got, sess, c.SessionID())
		}
		reserve(t, l2, 300, n)
	case <-time.After(15 * time.Second):
		// The server took the client's reconnect, queued while it was
		// frozen, before its session expirer ran, and kept the session
		// (ZooKeeper's call: a fresh-clone run saw it under load). The
		// session, and so the lease, live on: nobody could take the
		// worker while the only server was frozen.
		if c.SessionID() != sess {
			t.Fatalf("lease not done, yet the session changed: %#x -> %#x", sess, c.SessionID())
		}
		reserveAgain(t, l, n, 300)
	}
	if c.Conn() != client {
		t.Fatal("the client was given up for a frozen server")
	}
}
