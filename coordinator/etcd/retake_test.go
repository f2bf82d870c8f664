package etcd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// TestEndedLeaseWorkerTakenAgain: a lease the client gave up (no renewal
// answered for a TTL) leaves its owner keys in etcd until etcd expires it.
// Meanwhile the coordinator takes no free worker: its next acquisition
// waits for the owner key to go (or to age into a take-back) and takes the
// old worker again, reading the reservation the node compares with what
// it acknowledged.
func TestEndedLeaseWorkerTakenAgain(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	cfg := quietConfig(srv.Endpoints, "ended")
	cfg.Timing.LeaseTTL = testTTL
	c := newCoord(t, cfg)
	n := coordtest.Node("ended")
	spec := coordtest.Spec("ended", 2) // the cursor points at worker 1 after the first take
	l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctxFor(t, 10*time.Second), 1000, coordtest.Beat(n)); err != nil {
		t.Fatal(err)
	}
	etcd.EndSession(c)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not done after its session ended")
	}
	start := time.Now()
	var l2 coordinator.Lease
	for deadline := start.Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if l2, err = c.Acquire(ctxFor(t, 10*time.Second), spec, n); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no acquisition after the session ended: %v", err)
		}
	}
	t.Logf("acquired %s %v after the session ended", l2.Slot(), time.Since(start).Round(time.Millisecond))
	if l2.Slot() != l.Slot() || l2.ReadReserved() != 1000 {
		t.Fatalf("after the session ended the coordinator took %s reading reservation %d; want its old %s reading 1000",
			l2.Slot(), l2.ReadReserved(), l.Slot())
	}
}

// TestLeaseEndedNoticedByAWriteTakenAgain: etcd ends the lease behind a
// holding (expired while the process was paused; here revoked), and the
// holder's next write notices it first — its fence fails — before the
// coordinator's keepalive learns the lease is gone. The worker is still
// the one the node acknowledged: the next acquisition takes it again,
// reading the reservation the node compares with what it acknowledged,
// as when the keepalive notices first (TestEndedLeaseWorkerTakenAgain),
// not the free worker the cursor points at.
func TestLeaseEndedNoticedByAWriteTakenAgain(t *testing.T) {
	srv := etcdtest.StartEmbedded(t)
	cfg := quietConfig(srv.Endpoints, "endedwrite")
	cfg.Timing.LeaseTTL = testTTL
	c := newCoord(t, cfg)
	n := coordtest.Node("endedwrite")
	spec := coordtest.Spec("endedwrite", 2) // the cursor points at worker 1 after the first take
	l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctxFor(t, 10*time.Second), 1000, coordtest.Beat(n)); err != nil {
		t.Fatal(err)
	}
	id, _ := etcd.LeaseID(l)
	if _, err := c.Client().Revoke(ctxFor(t, 5*time.Second), id); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctxFor(t, 10*time.Second), 2000, coordtest.Beat(n)); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Reserve after the etcd lease ended: %v, want ErrLeaseLost", err)
	}
	start := time.Now()
	var l2 coordinator.Lease
	for deadline := start.Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if l2, err = c.Acquire(ctxFor(t, 10*time.Second), spec, n); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no acquisition after the lease ended: %v", err)
		}
	}
	if l2.Slot() != l.Slot() || l2.ReadReserved() != 1000 {
		t.Fatalf("after the etcd lease ended (noticed by a write) the coordinator took %s reading reservation %d; want its old %s reading 1000",
			l2.Slot(), l2.ReadReserved(), l.Slot())
	}
}
