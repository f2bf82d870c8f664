package coordtest

import (
	"errors"
	"testing"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
)

// The fence cases. Each must fail when the backend's fence is weakened
// (build tag firn_weakfence); wrap each in a top-level TestFence... test.

// FenceReacquire: a lease force-released and then re-acquired by the same
// client (the same etcd lease, the same ZooKeeper session) is dead: the
// first acquisition's Reserve and Release fail with ErrLeaseLost and leave
// the reservation to the second. A fence that compares only the client's
// lease or session lets the first one write.
func FenceReacquire(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	c, admin := cl.Connect(t, sysClock), cl.Connect(t, sysClock)
	spec := Spec("fence-reacquire", 1)
	n := Node("a")
	l1 := mustAcquire(t, c, spec, n)
	mustReserve(t, l1, 100, n)
	if err := admin.ForceRelease(ctxT(t, 10*time.Second), spec.Generator, l1.Slot()); err != nil {
		t.Fatal(err)
	}
	l2 := mustAcquire(t, c, spec, n)
	if l2.Slot() != l1.Slot() || l2.Floor() < 100 {
		t.Fatalf("re-acquired %s with Floor %d, want %s with Floor >= 100", l2.Slot(), l2.Floor(), l1.Slot())
	}
	mustReserve(t, l2, 200, n)
	if err := l1.Reserve(ctxT(t, 10*time.Second), 5000, Beat(n)); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("first acquisition's Reserve after re-acquisition: %v, want ErrLeaseLost", err)
	}
	if err := l1.Release(ctxT(t, 10*time.Second), 0); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("first acquisition's Release after re-acquisition: %v, want ErrLeaseLost", err)
	}
	if got := cl.Reserved(t, spec.Generator, l1.Slot()); got != 200 {
		t.Fatalf("reserved %d, want 200 (the live holder's)", got)
	}
	mustReserve(t, l2, 300, n)
}

// FenceTakeBackFrozen: a node's old process (same instance ID), frozen
// with SIGSTOP in another OS process while its lease is still alive, is
// taken back by a restart whose clock sees the heartbeat older than
// TakeBackAge. The restart starts at or above every reservation the old
// process had acknowledged; the thawed old process gets nothing more
// acknowledged and reports the loss. A take-back that writes over the old
// owner record (keeping what the old holder's fence compares) lets the old
// process write on.
func FenceTakeBackFrozen(t *testing.T, b Backend) {
	cl := b.NewCluster(t)
	spec := Spec("fence-takeback", 2)
	n := Node("restarting")
	ch := startChild(t, cl, spec, n, 1000)
	got := ch.waitAcquired(30 * time.Second)
	ch.waitAcks(3, 20*time.Second)
	ch.freeze()
	time.Sleep(300 * time.Millisecond) // let acks already written reach us

	// The restart's clock runs TakeBackAge+1s ahead: the frozen process's
	// last heartbeat is stale to it long before the TTL runs out.
	c := cl.Connect(t, clockguard.NewOffset(sysClock, coordinator.TakeBackAge+time.Second))
	l := mustAcquire(t, c, spec, n)
	if l.Slot() != got.slot {
		t.Fatalf("restart got %s, want its frozen predecessor's %s back", l.Slot(), got.slot)
	}
	checkAbove(t, ch, l)
	ch.thaw()
	lost := ch.waitLost(10 * time.Second)
	checkAbove(t, ch, l)
	if !lost {
		t.Fatalf("thawed old process did not report its lease lost: %q", tail(ch.output(), 5))
	}
	mustReserve(t, l, l.Floor()+10, n)
}
