package memory_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// TestSessionEndNoticedByAWriteTakenAgain: the store ends the client's
// session (Expire, as a TTL expiry would) and the holder's next write
// notices it first — its fence fails — before the client's renewal
// learns the session is gone. The worker is still the one the node
// acknowledged: the next acquisition takes it again, reading the
// reservation the node compares with what it acknowledged, as when the
// renewal notices first (coordtest.EndedSessionWorkerTakenAgain), not the
// free worker the cursor points at.
func TestSessionEndNoticedByAWriteTakenAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		n := coordtest.Node("endedwrite")
		spec := coordtest.Spec("endedwrite", 2) // the cursor points at worker 1 after the first take
		l := mustAcquire(t, c, spec, n)
		mustReserve(t, l, 1000, n)
		if !c.Expire() {
			t.Fatal("Expire found no session")
		}
		if err := l.Reserve(ctxFor(t, time.Second), 2000, coordtest.Beat(n)); !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("Reserve after the session ended: %v, want ErrLeaseLost", err)
		}
		l2 := mustAcquire(t, c, spec, n)
		if l2.Slot() != l.Slot() || l2.ReadReserved() != 1000 {
			t.Fatalf("after the session ended (noticed by a write) the coordinator took %s reading reservation %d; want its old %s reading 1000",
				l2.Slot(), l2.ReadReserved(), l.Slot())
		}
	})
}

// TestSessionGivenUpBeforeTheTakeIsTracked: the client gives its session
// up after a take went through and before the lease is tracked, so the
// session's end does not find the lease. The lease ends at once, and its
// worker is one of an ended session: the next acquisition waits for the
// store to expire the old session and takes that worker again, not the
// free one the cursor points at.
func TestSessionGivenUpBeforeTheTakeIsTracked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		c := connect(t, s)
		n := coordtest.Node("givenup")
		spec := coordtest.Spec("givenup", 2) // the cursor points at worker 1 after the first take
		once := false
		memory.SetAfterTake(c, func() {
			if !once {
				once = true
				memory.GiveUpSession(c)
			}
		})
		l := mustAcquire(t, c, spec, n)
		memory.SetAfterTake(c, nil)
		select {
		case <-l.Done():
		default:
			t.Fatalf("lease taken in a session given up before it was tracked is live")
		}
		var l2 coordinator.Lease
		for deadline := time.Now().Add(10 * ttl); ; time.Sleep(100 * time.Millisecond) {
			var err error
			if l2, err = c.Acquire(ctxFor(t, time.Second), spec, n); err == nil {
				break
			}
			if !errors.Is(err, coordinator.ErrEndedWaiting) || time.Now().After(deadline) {
				t.Fatalf("acquisition while the given-up session's owner record stands: %v, want ErrEndedWaiting until it goes", err)
			}
		}
		if l2.Slot() != l.Slot() {
			t.Fatalf("after the session was given up the coordinator took %s; want %s, the worker taken in it", l2.Slot(), l.Slot())
		}
	})
}
