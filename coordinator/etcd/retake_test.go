package etcd_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/etcdtest"
)

// retakeSetup is a coordinator on an embedded member with a 3 s lease,
// holding worker 0 of two with reservation 1000: the cursor points at
// worker 1 afterwards.
func retakeSetup(t *testing.T, name string) (*etcd.Coordinator, []string, coordinator.Spec, coordinator.NodeInfo, coordinator.Lease) {
	t.Helper()
	srv := etcdtest.StartEmbedded(t)
	cfg := quietConfig(srv.Endpoints, name)
	cfg.Timing.LeaseTTL = testTTL
	c := newCoord(t, cfg)
	n := coordtest.Node(name)
	spec := coordtest.Spec(name, 2)
	l, err := c.Acquire(ctxFor(t, 20*time.Second), spec, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctxFor(t, 10*time.Second), 1000, coordtest.Beat(n)); err != nil {
		t.Fatal(err)
	}
	return c, srv.Endpoints, spec, n, l
}

// acquireAgain acquires until it succeeds or 20 s pass.
func acquireAgain(t *testing.T, c *etcd.Coordinator, spec coordinator.Spec, n coordinator.NodeInfo) coordinator.Lease {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := c.Acquire(ctxFor(t, 10*time.Second), spec, n)
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("no acquisition: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestExpiredLeaseTakesItsWorkerBack: after its etcd lease was revoked
// (its owner keys deleted at once), a coordinator's next acquisition takes
// the worker it held again, not the free one the cursor points at: its
// reservation is what the node compares with what it acknowledged, and
// after a restore that comparison is what shows it.
func TestExpiredLeaseTakesItsWorkerBack(t *testing.T) {
	c, eps, spec, n, l := retakeSetup(t, "expired")
	id, _ := etcd.LeaseID(l)
	admin, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Revoke(ctxFor(t, 5*time.Second), id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("lease not done 15s after its etcd lease was revoked")
	}
	l2 := acquireAgain(t, c, spec, n)
	if l2.Slot() != l.Slot() || l2.ReadReserved() != 1000 {
		t.Fatalf("after the revoke the coordinator took %s reading reservation %d; want its old %s reading 1000",
			l2.Slot(), l2.ReadReserved(), l.Slot())
	}
}

// TestEndedLeaseWorkerTakenAgain: a lease the client gave up (no renewal
// answered for a TTL) leaves its owner keys in etcd until etcd expires it.
// Meanwhile the coordinator takes no free worker: its next acquisition
// waits for the owner key to go (or to age into a take-back) and takes the
// old worker again, reading the reservation the node compares.
func TestEndedLeaseWorkerTakenAgain(t *testing.T) {
	c, _, spec, n, l := retakeSetup(t, "ended")
	etcd.EndSession(c)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not done after its session ended")
	}
	start := time.Now()
	l2 := acquireAgain(t, c, spec, n)
	t.Logf("acquired %s %v after the session ended", l2.Slot(), time.Since(start).Round(time.Millisecond))
	if l2.Slot() != l.Slot() || l2.ReadReserved() != 1000 {
		t.Fatalf("after the session ended the coordinator took %s reading reservation %d; want its old %s reading 1000",
			l2.Slot(), l2.ReadReserved(), l.Slot())
	}
}
