package memory_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/firnid/firn/clockguard"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/memory"
	"github.com/firnid/firn/internal/testing/coordtest"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestFenceLeaseRestore: a restore puts the revision counter back, so an
// acquisition after it reuses the ownership token of one made after the
// snapshot. Holder A acquires a worker after the snapshot; the store is
// restored; holder B takes the same worker and its owner record gets A's
// token, in another session. A, whose renewals have not told it yet that
// its session is gone, must not get a write acknowledged: the guard's
// session compare refuses it (ErrLeaseLost). Under build tag
// firn_weakfence_lease, which drops that compare, A's write lands on B's
// worker and this test fails.
func TestFenceLeaseRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{TTL: time.Minute})
		clock := clockguard.NewSystem()
		spec := coordtest.Spec("gen", 4)

		// The generator is pinned (and its cursor moved) before the snapshot.
		pre := s.Connect(clock)
		first := coordtest.Node("first")
		l0, err := pre.Acquire(ctxFor(t, 10*time.Second), spec, first)
		if err != nil {
			t.Fatal(err)
		}
		if err := l0.Reserve(ctxFor(t, 10*time.Second), 50, coordtest.Beat(first)); err != nil {
			t.Fatal(err)
		}
		if err := l0.Release(ctxFor(t, 10*time.Second), 50); err != nil {
			t.Fatal(err)
		}
		pre.Close()
		snap := s.Snapshot()

		// A acquires after the snapshot; its renewals get no answer, so it
		// keeps believing in its session across the restore.
		a := s.Connect(clock)
		defer a.Close()
		na := coordtest.Node("a")
		la, err := a.Acquire(ctxFor(t, 10*time.Second), spec, na)
		if err != nil {
			t.Fatal(err)
		}
		if err := la.Reserve(ctxFor(t, 10*time.Second), 100, coordtest.Beat(na)); err != nil {
			t.Fatal(err)
		}
		a.Faults().SetAvailability(memory.OpRenew, memory.Hanging)

		s.Restore(snap)

		b := s.Connect(clock)
		defer b.Close()
		nb := coordtest.Node("b")
		lb, err := b.Acquire(ctxFor(t, 10*time.Second), spec, nb)
		if err != nil {
			t.Fatal(err)
		}
		if lb.Slot() != la.Slot() || memory.TokenOf(lb) != memory.TokenOf(la) || b.Session() == memory.ClientOf(la).Session() {
			t.Fatalf("the premise does not hold: A holds %s (token %d, session %d), B got %s (token %d, session %d); want the same slot and token in another session",
				la.Slot(), memory.TokenOf(la), memory.ClientOf(la).Session(), lb.Slot(), memory.TokenOf(lb), b.Session())
		}
		if err := lb.Reserve(ctxFor(t, 10*time.Second), 150, coordtest.Beat(nb)); err != nil {
			t.Fatal(err)
		}

		// A writes again: its guard compares the token B's record has.
		if err := la.Reserve(ctxFor(t, 10*time.Second), 200, coordtest.Beat(na)); !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("A's Reserve after the restore, against B's owner record of the same token: %v, want ErrLeaseLost", err)
		}
		if err := la.Release(ctxFor(t, 10*time.Second), 100); !errors.Is(err, coordinator.ErrLeaseLost) {
			t.Fatalf("A's Release after the restore: %v, want ErrLeaseLost", err)
		}
		if got := s.Reserved(spec.Generator, la.Slot()); got != 150 {
			t.Fatalf("B's reservation holds %d after A's attempts, want B's 150", got)
		}
		if err := lb.Reserve(ctxFor(t, 10*time.Second), 300, coordtest.Beat(nb)); err != nil {
			t.Fatalf("B's Reserve after A's attempts: %v", err)
		}
	})
}

// TestFenceReacquireVirtual is the re-acquisition fence in virtual time.
func TestFenceReacquireVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { coordtest.FenceReacquire(t, backend{ttl: testTTL}) })
}

// TestFenceLeaseCounterRestore: coordtest.FenceLeaseCounterRestore on the
// store's Snapshot and Restore (a restore puts the revision counter back).
func TestFenceLeaseCounterRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Config{TTL: time.Minute})
		clock := clockguard.NewSystem()
		pre, a, b := s.Connect(clock), s.Connect(clock), s.Connect(clock)
		defer pre.Close()
		defer a.Close()
		defer b.Close()
		var snap *memory.Snapshot
		coordtest.FenceLeaseCounterRestore(t, pre, a, b, func() { snap = s.Snapshot() }, func() { s.Restore(snap) })
	})
}
