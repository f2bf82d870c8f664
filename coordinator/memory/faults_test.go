package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// The fault tests run in testing/synctest bubbles: every wait below is
// virtual time, and durations are asserted exactly.

const (
	ttl     = 5 * time.Second
	timeout = time.Second
)

func newStore() *memory.Store { return memory.New(memory.Config{TTL: ttl, Timeout: timeout}) }

func connect(t *testing.T, s *memory.Store) *memory.Client {
	c := s.Connect(clockguard.NewSystem())
	t.Cleanup(func() { c.Close() })
	return c
}

func mustAcquire(t *testing.T, c *memory.Client, spec coordinator.Spec, n coordinator.NodeInfo) coordinator.Lease {
	t.Helper()
	l, err := c.Acquire(ctxFor(t, 30*time.Second), spec, n)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", n.Name, err)
	}
	return l
}

func mustReserve(t *testing.T, l coordinator.Lease, until int64, n coordinator.NodeInfo) {
	t.Helper()
	if err := l.Reserve(ctxFor(t, 30*time.Second), until, coordtest.Beat(n)); err != nil {
		t.Fatalf("Reserve(%d): %v", until, err)
	}
}

// live is the live slots of generator, read directly.
func live(t *testing.T, s *memory.Store, generator string) []coordinator.Slot {
	t.Helper()
	var out []coordinator.Slot
	for _, h := range s.Holders(generator) {
		if h.Live {
			out = append(out, h.Slot)
		}
	}
	return out
}

func isDone(l coordinator.Lease) bool {
	select {
	case <-l.Done():
		return true
	default:
		return false
	}
}

// waitDone waits for l's Done and returns how long it took.
func waitDone(t *testing.T, l coordinator.Lease, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("lease %s: Done not closed within %v", l.Slot(), within)
	}
	return time.Since(start)
}

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		n := coordtest.Node("a")
		spec := coordtest.Spec("lat", 4)

		c.Faults().SetLatency(memory.OpAcquire, 300*time.Millisecond)
		start := time.Now()
		l := mustAcquire(t, c, spec, n)
		if d := time.Since(start); d != 600*time.Millisecond {
			t.Fatalf("Acquire took %v, want 600ms (the session grant and the take, 300ms each)", d)
		}

		// The store's latency and the client's add up.
		s.Faults().SetLatency(memory.OpReserve|memory.OpRelease, 100*time.Millisecond)
		c.Faults().SetLatency(memory.OpReserve, 50*time.Millisecond)
		start = time.Now()
		mustReserve(t, l, 100, n)
		if d := time.Since(start); d != 150*time.Millisecond {
			t.Fatalf("Reserve took %v, want 150ms", d)
		}

		// A call whose context ends during the delay fails and writes
		// nothing.
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
		err := l.Reserve(ctx, 200, coordtest.Beat(n))
		cancel()
		if !errors.Is(err, coordinator.ErrUnavailable) || s.Reserved("lat", l.Slot()) != 100 {
			t.Fatalf("Reserve cut short by its context: %v, stored %d; want ErrUnavailable and 100 kept", err, s.Reserved("lat", l.Slot()))
		}

		// Renewals are delayed too, but well within the TTL: nothing is lost.
		c.Faults().SetLatency(memory.OpRenew, 400*time.Millisecond)
		time.Sleep(3 * ttl)
		if isDone(l) {
			t.Fatal("a lease ended with renewals delayed 400ms on a 5s TTL")
		}

		s.Faults().Clear()
		c.Faults().SetLatency(memory.OpAll, 0)
		start = time.Now()
		mustReserve(t, l, 300, n)
		if d := time.Since(start); d != 0 {
			t.Fatalf("Reserve after the latency was cleared took %v", d)
		}
	})
}

func TestUnavailableRefusing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c, other := connect(t, s), connect(t, s)
		n := coordtest.Node("a")
		spec := coordtest.Spec("refuse", 1)
		l := mustAcquire(t, c, spec, n)
		mustReserve(t, l, 100, n)

		s.Faults().SetAvailability(memory.OpAll, memory.Refusing)
		cut := time.Now()
		start := time.Now()
		err := l.Reserve(ctxFor(t, 10*time.Second), 200, coordtest.Beat(n))
		if !errors.Is(err, coordinator.ErrUnavailable) || time.Since(start) != 0 || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("Reserve while refusing: %v after %v; want ErrUnavailable at once", err, time.Since(start))
		}
		if _, err := c.Workers(ctxFor(t, time.Second), "refuse"); !errors.Is(err, coordinator.ErrUnavailable) {
			t.Fatalf("Workers while refusing: %v", err)
		}
		if _, err := other.Acquire(ctxFor(t, 2*time.Second), spec, coordtest.Node("b")); !errors.Is(err, coordinator.ErrUnavailable) ||
			!errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire while refusing: %v, want ErrUnavailable once its context ended", err)
		}
		// Renewals are refused too: the client gives its session up at the
		// first failed renewal once a TTL has passed since the last
		// acknowledged one was sent.
		waitDone(t, l, 2*ttl)
		if d := time.Since(cut); d < ttl-time.Second || d > ttl+timeout {
			t.Fatalf("Done %v after the store began refusing, want about the TTL %v", d, ttl)
		}
		if err := l.Reserve(ctxFor(t, time.Second), 300, coordtest.Beat(n)); !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("Reserve after the lease ended: %v, want ErrLeaseLost", err)
		}

		// Back again: the store has ended the session by now, and another
		// node takes the worker above what was acknowledged.
		time.Sleep(ttl)
		s.Faults().SetAvailability(memory.OpAll, memory.Available)
		if got := live(t, s, "refuse"); len(got) != 0 {
			t.Fatalf("live slots %v after the TTL, want none", got)
		}
		lb := mustAcquire(t, other, spec, coordtest.Node("b"))
		if lb.Slot() != l.Slot() || lb.Floor() < 100 {
			t.Fatalf("after the outage: %s with Floor %d, want %s above 100", lb.Slot(), lb.Floor(), l.Slot())
		}
	})
}

func TestUnavailableHanging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		n := coordtest.Node("a")
		spec := coordtest.Spec("hang", 2)
		l := mustAcquire(t, c, spec, n)

		// Only this client is cut off (a partition).
		c.Faults().SetAvailability(memory.OpAll, memory.Hanging)
		start := time.Now()
		err := l.Reserve(ctxFor(t, 10*time.Second), 200, coordtest.Beat(n))
		if !errors.Is(err, coordinator.ErrUnavailable) || time.Since(start) != timeout {
			t.Fatalf("Reserve while hanging: %v after %v; want ErrUnavailable after the call timeout %v", err, time.Since(start), timeout)
		}
		start = time.Now()
		err = l.Reserve(ctxFor(t, 300*time.Millisecond), 200, coordtest.Beat(n))
		if !errors.Is(err, coordinator.ErrUnavailable) || time.Since(start) != 300*time.Millisecond {
			t.Fatalf("Reserve while hanging with a 300ms context: %v after %v", err, time.Since(start))
		}
		if s.Reserved("hang", l.Slot()) != -1 {
			t.Fatal("a hanging Reserve was applied")
		}
		// Other clients are served; this one's session runs out.
		other := connect(t, s)
		mustAcquire(t, other, spec, coordtest.Node("b"))
		waitDone(t, l, 2*ttl)
		time.Sleep(ttl)
		c.Faults().SetAvailability(memory.OpAll, memory.Available)
		l2 := mustAcquire(t, c, spec, n) // a new session
		if l2.Slot() != l.Slot() {
			t.Fatalf("after the partition: got %s, want %s back", l2.Slot(), l.Slot())
		}
	})
}

func TestLostReplyAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		spec := coordtest.Spec("lost", 4)
		var held []coordinator.Lease
		for i := 0; i < 2; i++ {
			c.Faults().LoseReplies(memory.OpAcquire, 1)
			l := mustAcquire(t, c, spec, coordtest.Node(fmt.Sprintf("n%d", i)))
			if c.Faults().Pending(memory.OpAcquire) != 0 {
				t.Fatal("no acquisition reply was lost")
			}
			held = append(held, l)
			if got := live(t, s, "lost"); len(got) != len(held) {
				t.Fatalf("after %d acquisitions, each with a lost reply: live %v, want %d (the retry deletes the stray)", len(held), got, len(held))
			}
		}
		// Every reply lost until the caller gives up: one stray at most.
		s.Faults().LoseReplies(memory.OpAcquire, 1000)
		_, err := c.Acquire(ctxFor(t, 2*time.Second), spec, coordtest.Node("n2"))
		if !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), "reply was lost") {
			t.Fatalf("Acquire with every reply lost: %v", err)
		}
		if got := live(t, s, "lost"); len(got) != 3 {
			t.Fatalf("live %v, want the 2 held and one stray", got)
		}
		s.Faults().LoseReplies(memory.OpAcquire, 0)
		l := mustAcquire(t, c, spec, coordtest.Node("n2"))
		if got := live(t, s, "lost"); len(got) != 3 {
			t.Fatalf("live %v after the next Acquire, want 3: the stray deleted, one taken", got)
		}
		for _, h := range append(held, l) {
			mustReserve(t, h, 10, coordtest.Node("x"))
		}
	})
}

func TestLostReplyReserveAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		n := coordtest.Node("a")
		l := mustAcquire(t, c, coordtest.Spec("lostw", 2), n)
		mustReserve(t, l, 100, n)

		c.Faults().LoseReplies(memory.OpReserve, 1)
		err := l.Reserve(ctxFor(t, time.Second), 500, coordtest.Beat(n))
		if !errors.Is(err, coordinator.ErrUnavailable) || s.Reserved("lostw", l.Slot()) != 500 || l.Reserved() != 100 {
			t.Fatalf("Reserve with its reply lost: %v, stored %d, acknowledged %d; want ErrUnavailable, 500 written, 100 acknowledged",
				err, s.Reserved("lostw", l.Slot()), l.Reserved())
		}
		mustReserve(t, l, 600, n)
		if l.Reserved() != 600 {
			t.Fatalf("Reserved %d, want 600", l.Reserved())
		}

		s.Faults().LoseReplies(memory.OpRelease, 1)
		err = l.Release(ctxFor(t, time.Second), 300)
		if !errors.Is(err, coordinator.ErrUnavailable) || s.Reserved("lostw", l.Slot()) != 300 || len(live(t, s, "lostw")) != 0 {
			t.Fatalf("Release with its reply lost: %v, stored %d, live %v; want ErrUnavailable, 300 written, the slot free",
				err, s.Reserved("lostw", l.Slot()), live(t, s, "lostw"))
		}
		if isDone(l) {
			t.Fatal("the lease ended although its Release reply was lost")
		}
		if err := l.Release(ctxFor(t, time.Second), 300); !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("Release again: %v, want ErrLeaseLost (the first one was applied)", err)
		}
	})
}

func TestExpireClientAndLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c, other := connect(t, s), connect(t, s)
		spec := coordtest.Spec("exp", 4)
		na, nb, nc := coordtest.Node("a"), coordtest.Node("b"), coordtest.Node("c")
		la, lb := mustAcquire(t, c, spec, na), mustAcquire(t, c, spec, nb)
		lc := mustAcquire(t, other, spec, nc)

		// One lease: its record goes, Done closes at once; the session and
		// the client's other lease live on.
		if !s.ExpireLease(la) || !isDone(la) {
			t.Fatal("ExpireLease did not end the lease at once")
		}
		if err := la.Reserve(ctxFor(t, time.Second), 10, coordtest.Beat(na)); !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("Reserve of an expired lease: %v", err)
		}
		mustReserve(t, lb, 10, nb)
		if s.ExpireLease(la) {
			t.Fatal("ExpireLease twice: the second found the record")
		}

		// The whole client: its records go at once, it learns so at its
		// next renewal (within TTL/5).
		if !c.Expire() {
			t.Fatal("Expire found no session")
		}
		if got := live(t, s, "exp"); len(got) != 1 || got[0] != lc.Slot() {
			t.Fatalf("live %v after Expire, want only %s", got, lc.Slot())
		}
		if d := waitDone(t, lb, ttl); d > ttl/5 {
			t.Fatalf("lease learnt of its session's expiry after %v, want within %v", d, ttl/5)
		}
		if isDone(lc) {
			t.Fatal("another client's lease ended")
		}
		mustAcquire(t, c, spec, na) // a new session
	})
}

func TestFreezeThaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		n := coordtest.Node("a")
		spec := coordtest.Spec("frz", 1)
		l := mustAcquire(t, c, spec, n)
		mustReserve(t, l, 100, n)

		// A call made while frozen does not return until Thaw.
		c.Freeze()
		ret := make(chan error, 1)
		go func() { ret <- l.Reserve(context.Background(), 200, coordtest.Beat(n)) }()
		time.Sleep(ttl / 2)
		select {
		case err := <-ret:
			t.Fatalf("a frozen client's Reserve returned %v", err)
		default:
		}
		c.Thaw()
		if err := <-ret; err != nil {
			t.Fatalf("Reserve after a short freeze: %v", err)
		}

		// Frozen past the TTL: the session runs out, another node takes
		// the worker above everything acknowledged; the thawed holder gets
		// nothing more acknowledged and learns it lost.
		c.Freeze()
		go func() { ret <- l.Reserve(context.Background(), 5000, coordtest.Beat(n)) }()
		time.Sleep(ttl + time.Second)
		other := connect(t, s)
		lb := mustAcquire(t, other, spec, coordtest.Node("b"))
		if lb.Floor() < 200 {
			t.Fatalf("new holder's Floor %d, want >= 200", lb.Floor())
		}
		if isDone(l) {
			t.Fatal("a frozen client's lease ended while frozen")
		}
		c.Thaw()
		if err := <-ret; !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("thawed Reserve: %v, want ErrLeaseLost", err)
		}
		if got := s.Reserved("frz", l.Slot()); got != 200 {
			t.Fatalf("reserved %d after the thawed write, want 200", got)
		}
		waitDone(t, l, ttl)
	})
}

func TestKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		n := coordtest.Node("a")
		spec := coordtest.Spec("kill", 1)
		l := mustAcquire(t, c, spec, n)
		mustReserve(t, l, 100, n)
		c.Kill()
		if !isDone(l) {
			t.Fatal("a killed client's lease is not done")
		}
		if _, err := c.Peers(ctxFor(t, time.Second)); !errors.Is(err, coordinator.ErrUnavailable) {
			t.Fatalf("Peers of a killed client: %v", err)
		}
		other := connect(t, s)
		if _, err := other.Acquire(ctxFor(t, time.Second), spec, coordtest.Node("b")); !errors.Is(err, coordinator.ErrExhausted) {
			t.Fatalf("Acquire right after the kill: %v, want ErrExhausted (ownership lingers)", err)
		}
		time.Sleep(ttl)
		if lb := mustAcquire(t, other, spec, coordtest.Node("b")); lb.Floor() != 100 {
			t.Fatalf("Floor %d after the TTL, want 100", lb.Floor())
		}
	})
}

func TestRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		a, b := connect(t, s), connect(t, s)
		spec := coordtest.Spec("rst", 4)
		na, nb := coordtest.Node("a"), coordtest.Node("b")
		la := mustAcquire(t, a, spec, na)
		mustReserve(t, la, 100, na)
		snap := s.Snapshot()
		if snap.Reserved("rst", la.Slot()) != 100 || snap.Revision() != s.Revision() {
			t.Fatalf("snapshot: reserved %d revision %d", snap.Reserved("rst", la.Slot()), snap.Revision())
		}

		mustReserve(t, la, 500, na)
		lb := mustAcquire(t, b, spec, nb) // in a session granted after the snapshot
		mustReserve(t, lb, 700, nb)
		if err := b.MarkRestored(ctxFor(t, time.Second), coordinator.RestoreEvidence{Generator: "rst", Slot: lb.Slot(),
			Acked: 10, Shown: 5, Node: nb}); err != nil {
			t.Fatal(err)
		}

		s.Restore(snap)
		if s.Revision() != snap.Revision() || s.Reserved("rst", la.Slot()) != 100 || s.Reserved("rst", lb.Slot()) != -1 {
			t.Fatalf("after the restore: revision %d, reserved %d and %d; want %d, 100 and -1",
				s.Revision(), s.Reserved("rst", la.Slot()), s.Reserved("rst", lb.Slot()), snap.Revision())
		}
		if s.Sessions() != 1 {
			t.Fatalf("%d sessions after the restore, want 1 (a's, from the snapshot)", s.Sessions())
		}
		if got := live(t, s, "rst"); len(got) != 1 || got[0] != la.Slot() {
			t.Fatalf("live %v after the restore, want %s only", got, la.Slot())
		}
		gs, err := a.Generators(ctxFor(t, time.Second))
		if err != nil || len(gs) != 1 || gs[0].Restore != nil {
			t.Fatalf("Generators after the restore: %+v, %v; want the marker gone with the snapshot", gs, err)
		}

		// A's next write finds its reservation rolled back.
		err = la.Reserve(ctxFor(t, time.Second), 600, coordtest.Beat(na))
		var rb *coordinator.RolledBackError
		if !errors.As(err, &rb) || rb.Seen != 100 || rb.Acked != 500 || s.Reserved("rst", la.Slot()) != 600 {
			t.Fatalf("A's Reserve after the restore: %v, stored %d; want a rollback 100 < 500, raised to 600", err, s.Reserved("rst", la.Slot()))
		}
		// B's session is gone: its client learns so at its next renewal.
		waitDone(t, lb, ttl)
		if err := lb.Reserve(ctxFor(t, time.Second), 800, coordtest.Beat(nb)); !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("B's Reserve after the restore: %v, want ErrLeaseLost", err)
		}
		// The slot B held is free again, and its token is handed out anew.
		c := connect(t, s)
		lc := mustAcquire(t, c, spec, coordtest.Node("c"))
		if lc.Slot() != lb.Slot() || memory.TokenOf(lc) <= memory.TokenOf(la) {
			t.Fatalf("after the restore: C got %s token %d; want B's %s", lc.Slot(), memory.TokenOf(lc), lb.Slot())
		}
	})
}

// TestPeersOnEachClientsClock: a heartbeat is received on each watching
// client's own clock; a frozen client receives it when thawed; one that
// cannot reach the store answers from what it had and reads all again
// afterwards; a restore makes every watcher read all again.
func TestPeersOnEachClientsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		fa, fb := clockguard.NewFake(t0), clockguard.NewFake(t0.Add(time.Hour))
		obsA, obsB := s.Connect(fa), s.Connect(fb)
		defer obsA.Close()
		defer obsB.Close()
		h := connect(t, s)
		n := coordtest.Node("h")
		l := mustAcquire(t, h, coordtest.Spec("peers", 2), n)
		for _, o := range []*memory.Client{obsA, obsB} {
			ps, err := o.Peers(ctxFor(t, time.Second))
			if err != nil || len(ps) != 1 {
				t.Fatalf("first Peers: %+v, %v; want the one live holder", ps, err)
			}
		}
		received := func(o *memory.Client) time.Time {
			t.Helper()
			ps, err := o.Peers(ctxFor(t, time.Second))
			if err != nil || len(ps) != 1 {
				t.Fatalf("Peers: %+v, %v", ps, err)
			}
			return ps[0].Received
		}
		if !received(obsA).Equal(t0) || !received(obsB).Equal(t0.Add(time.Hour)) {
			t.Fatalf("initial receipt times %v and %v", received(obsA), received(obsB))
		}
		fa.Advance(time.Minute)
		fb.Advance(time.Minute)
		mustReserve(t, l, 10, n)
		if !received(obsA).Equal(t0.Add(time.Minute)) || !received(obsB).Equal(t0.Add(time.Hour+time.Minute)) {
			t.Fatalf("receipt times %v and %v, want each observer's clock at the write", received(obsA), received(obsB))
		}

		// Frozen: received when thawed.
		obsA.Freeze()
		mustReserve(t, l, 20, n)
		fa.Advance(time.Minute)
		obsA.Thaw()
		if !received(obsA).Equal(t0.Add(2 * time.Minute)) {
			t.Fatalf("frozen observer received at %v, want at the thaw %v", received(obsA), t0.Add(2*time.Minute))
		}

		// Cut off: answers at once from what it had; afterwards reads all.
		obsB.Faults().SetAvailability(memory.OpAll, memory.Hanging)
		mustReserve(t, l, 30, n)
		fb.Advance(time.Minute)
		start := time.Now()
		if got := received(obsB); !got.Equal(t0.Add(time.Hour+time.Minute)) || time.Since(start) != 0 {
			t.Fatalf("cut-off observer: %v after %v, want the old receipt at once", got, time.Since(start))
		}
		obsB.Faults().SetAvailability(memory.OpAll, memory.Available)
		if got := received(obsB); !got.Equal(t0.Add(time.Hour + 2*time.Minute)) {
			t.Fatalf("observer back: received %v, want read again now %v", got, t0.Add(time.Hour+2*time.Minute))
		}

		// A restore: every watcher reads all again.
		snap := s.Snapshot()
		fa.Advance(time.Minute)
		s.Restore(snap)
		if got := received(obsA); !got.Equal(t0.Add(3 * time.Minute)) {
			t.Fatalf("after a restore: received %v, want read again now", got)
		}
		if err := l.Release(ctxFor(t, time.Second), 30); err != nil {
			t.Fatal(err)
		}
		if ps, _ := obsA.Peers(ctxFor(t, time.Second)); len(ps) != 0 {
			t.Fatalf("Peers after the release: %+v", ps)
		}
	})
}

// TestDeterministic: the same calls give the same outcome, faults
// included: two runs of one schedule in two bubbles produce the same
// trace.
func TestDeterministic(t *testing.T) {
	run := func() string {
		var trace []string
		synctest.Test(t, func(t *testing.T) {
			s := memory.New(memory.Config{TTL: ttl, Timeout: timeout,
				Incarnation: func(g string) string { return "inc-" + g }})
			logf := func(format string, args ...any) { trace = append(trace, fmt.Sprintf(format, args...)) }
			c1, c2 := s.Connect(clockguard.NewSystem()), s.Connect(clockguard.NewSystem())
			defer c1.Close()
			defer c2.Close()
			spec := coordtest.Spec("det", 3)
			c1.Faults().LoseReplies(memory.OpAcquire, 1)
			s.Faults().SetLatency(memory.OpReserve, 70*time.Millisecond)
			var ls []coordinator.Lease
			for i, c := range []*memory.Client{c1, c2, c1} {
				l, err := c.Acquire(ctxFor(t, 10*time.Second), spec, coordtest.Node(fmt.Sprintf("n%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				logf("acquired %s token %d floor %d inc %s at %v", l.Slot(), memory.TokenOf(l), l.Floor(), l.Incarnation(), time.Now())
				ls = append(ls, l)
			}
			snap := s.Snapshot()
			for i, l := range ls {
				logf("reserve %d: %v at %v", i, l.Reserve(ctxFor(t, time.Second), int64(100*(i+1)), coordtest.Beat(coordtest.Node("x"))), time.Now())
			}
			c2.Faults().SetAvailability(memory.OpRenew, memory.Refusing)
			<-ls[1].Done()
			logf("lease 1 done at %v", time.Now())
			s.Restore(snap)
			_, err := c2.Acquire(ctxFor(t, time.Second), spec, coordtest.Node("n1"))
			logf("c2 acquire while its renewals are refused: %v", err)
			hs, err := c1.Workers(ctxFor(t, time.Second), "det")
			logf("workers %+v %v revision %d", hs, err, s.Revision())
		})
		return strings.Join(trace, "\n")
	}
	first, second := run(), run()
	if first != second {
		t.Fatalf("two runs of one schedule differ:\n%s\n---\n%s", first, second)
	}
	t.Logf("trace:\n%s", first)
}

func TestFaultNames(t *testing.T) {
	if got := (memory.OpReserve | memory.OpRenew).String(); got != "reserve|renew" {
		t.Errorf("Op.String = %q", got)
	}
	if got := memory.Op(0).String(); got != "none" {
		t.Errorf("Op(0).String = %q", got)
	}
	if memory.Hanging.String() != "hanging" || memory.Refusing.String() != "refusing" || memory.Available.String() != "available" {
		t.Error("Availability names")
	}
	var f memory.Faults
	f.LoseReplies(memory.OpAll, 3)
	if f.Pending(memory.OpReserve) != 3 || f.Pending(memory.OpRenew) != 0 {
		t.Error("LoseReplies applies to holder writes only")
	}
}

// TestReserverInVirtualTime: the Reserver loop a node runs, on a memory
// lease in a bubble: one write per interval in virtual time; cut off from
// the store, its writes fail after the call timeout and it stops with
// ErrLeaseLost once the session ran out, never having had a write
// acknowledged that the store does not hold.
func TestReserverInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		n := coordtest.Node("r")
		l := mustAcquire(t, c, coordtest.Spec("rsv", 1), n)
		clock := clockguard.NewSystem()
		nowMs := func() int64 { w, _ := clock.Now(); return w.UnixMilli() }
		var last atomic.Int64
		rs, err := coordinator.NewReserver(coordinator.ReserverConfig{
			Lease: l, Node: n, Clock: clock, Now: nowMs, OnAck: last.Store,
			Window: 5000, Interval: time.Second, CallTimeout: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- rs.Run(context.Background()) }()
		time.Sleep(10*time.Second + time.Millisecond)
		if rs.Writes() != 11 || rs.Failures() != 0 {
			t.Fatalf("after 10s: %d writes, %d failures; want 11 (one at once, then one a second) and 0", rs.Writes(), rs.Failures())
		}
		if got := s.Reserved("rsv", l.Slot()); got != last.Load() || got != nowMs()-1+5000 {
			t.Fatalf("stored %d, last acknowledged %d, want both at the last write's now + window", got, last.Load())
		}
		cut := time.Now()
		c.Faults().SetAvailability(memory.OpAll, memory.Hanging)
		// Given up at the first failed renewal once a TTL has passed since
		// the last acknowledged one was sent.
		if d := waitDone(t, l, 2*ttl); d < ttl-time.Second || d > ttl+timeout {
			t.Fatalf("the lease ended %v after the cut, want about the TTL %v", d, ttl)
		}
		err = <-done // after the write in flight gives up
		if !errors.Is(err, coordinator.ErrLeaseLost) || rs.Failures() == 0 {
			t.Fatalf("Run while cut off: %v after %d failures, want ErrLeaseLost", err, rs.Failures())
		}
		if d := time.Since(cut); d > ttl+timeout {
			t.Fatalf("Run returned %v after the cut, want within the TTL and one call timeout %v", d, ttl+timeout)
		}
		if got := s.Reserved("rsv", l.Slot()); got != last.Load() {
			t.Fatalf("stored %d, last acknowledged %d", got, last.Load())
		}
	})
}
