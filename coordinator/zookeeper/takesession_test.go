package zookeeper_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// TestTakeInALaterSessionLeavesNoStray: the client is given up (redial)
// after a take read its candidate and before the acquiring multi is sent,
// so the multi creates the owner node in the new client's session while
// the take was planned in the old one. The lease built for the old
// session ends at once; the owner node it leaves in the current session
// must not keep the worker from this very coordinator (no lease holds it,
// and a record of one's own current session is never taken back): the
// next acquisition takes the worker.
func TestTakeInALaterSessionLeavesNoStray(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.ConnectWith(t, sysClock, nil)
	n := coordtest.Node("latersession")
	spec := coordtest.Spec("latersession", 1)
	var gaveUp atomic.Bool
	zookeeper.SetAfterRead(c, func(coordinator.Slot) {
		if !gaveUp.Swap(true) {
			zookeeper.GiveUpClient(c)
		}
	})
	old := c.SessionID()
	l, err := c.Acquire(ctxT(t, 20*time.Second), spec, n)
	t.Logf("first acquisition across the give-up (session %#x -> %#x): lease %v, err %v", old, c.SessionID(), l != nil, err)
	if l != nil && !isDone(l) {
		// A live lease holds the worker: it must be the current session's.
		if got, _ := zookeeper.SessionOf(l); got != c.SessionID() {
			t.Fatalf("live lease in session %#x, coordinator's session %#x", got, c.SessionID())
		}
		return
	}
	zookeeper.SetAfterRead(c, nil)
	l2, err := c.Acquire(ctxT(t, 20*time.Second), spec, n)
	if err != nil {
		t.Fatalf("the only worker, after a take whose multi ran in the new session: %v", err)
	}
	if got, _ := zookeeper.SessionOf(l2); got != c.SessionID() || isDone(l2) {
		t.Fatalf("lease in session %#x (done %v), coordinator's session %#x", got, isDone(l2), c.SessionID())
	}
}

// TestSessionEndedBeforeTheTakeIsTrackedRemembersIt: the client is given
// up after the acquiring multi went through and before the lease is
// tracked, so the session's end does not see the lease, which ends at
// once. Its worker is still one of an ended session: the next
// acquisition waits for the old session's owner node to go and takes that
// worker again, not the free one the cursor points at.
func TestSessionEndedBeforeTheTakeIsTrackedRemembersIt(t *testing.T) {
	cl := newCluster(t, standalone(t))
	c := cl.ConnectWith(t, sysClock, nil)
	n := coordtest.Node("endedbeforetracked")
	spec := coordtest.Spec("endedbeforetracked", 2) // the cursor points at the other worker after the first take
	var taken atomic.Pointer[coordinator.Slot]
	zookeeper.SetAfterTake(c, func(s coordinator.Slot) {
		if taken.CompareAndSwap(nil, &s) {
			zookeeper.GiveUpClient(c)
		}
	})
	l, err := c.Acquire(ctxT(t, 20*time.Second), spec, n)
	if err != nil {
		t.Fatal(err)
	}
	if !isDone(l) {
		t.Fatalf("lease taken in a session given up before it was tracked is live")
	}
	zookeeper.SetAfterTake(c, nil)
	start := time.Now()
	var l2 coordinator.Lease
	for deadline := start.Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if l2, err = c.Acquire(ctxT(t, 10*time.Second), spec, n); err == nil {
			break
		}
		if !errors.Is(err, coordinator.ErrEndedWaiting) || time.Now().After(deadline) {
			t.Fatalf("acquisition while the given-up session's owner node stands: %v, want ErrEndedWaiting until it goes", err)
		}
	}
	t.Logf("acquired %s %v after the session ended", l2.Slot(), time.Since(start).Round(time.Millisecond))
	if l2.Slot() != *taken.Load() {
		t.Fatalf("after the session ended the coordinator took %s; want %s, the worker taken in it", l2.Slot(), *taken.Load())
	}
}
