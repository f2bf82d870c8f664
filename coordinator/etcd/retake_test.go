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
	r := startRetake(t, "ended")
	etcd.EndSession(r.c)
	select {
	case <-r.l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not done after its session ended")
	}
	r.takenAgain(t, "the session ended")
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
	r := startRetake(t, "endedwrite")
	id, _ := etcd.LeaseID(r.l)
	if _, err := r.c.Client().Revoke(ctxFor(t, 5*time.Second), id); err != nil {
		t.Fatal(err)
	}
	if err := r.l.Reserve(ctxFor(t, 10*time.Second), 2000, coordtest.Beat(r.n)); !errors.Is(err, coordinator.ErrLeaseLost) {
		t.Fatalf("Reserve after the etcd lease ended: %v, want ErrLeaseLost", err)
	}
	r.takenAgain(t, "the etcd lease ended (noticed by a write)")
}

// retake is a coordinator holding worker 0 of a two-worker generator
// (the cursor then points at worker 1), its reservation 1000 acknowledged.
type retake struct {
	c    *etcd.Coordinator
	n    coordinator.NodeInfo
	spec coordinator.Spec
	l    coordinator.Lease
}

func startRetake(t *testing.T, name string) retake {
	t.Helper()
	srv := etcdtest.StartEmbedded(t)
	cfg := quietConfig(srv.Endpoints, name)
	cfg.Timing.LeaseTTL = testTTL
	r := retake{c: newCoord(t, cfg), n: coordtest.Node(name), spec: coordtest.Spec(name, 2)}
	var err error
	if r.l, err = r.c.Acquire(ctxFor(t, 20*time.Second), r.spec, r.n); err != nil {
		t.Fatal(err)
	}
	if err := r.l.Reserve(ctxFor(t, 10*time.Second), 1000, coordtest.Beat(r.n)); err != nil {
		t.Fatal(err)
	}
	return r
}

// takenAgain acquires until an acquisition goes through (20 s at most)
// and checks it took the old worker again, reading 1000.
func (r retake) takenAgain(t *testing.T, after string) {
	t.Helper()
	start := time.Now()
	var l2 coordinator.Lease
	var err error
	for deadline := start.Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if l2, err = r.c.Acquire(ctxFor(t, 10*time.Second), r.spec, r.n); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no acquisition after %s: %v", after, err)
		}
	}
	t.Logf("acquired %s %v after %s", l2.Slot(), time.Since(start).Round(time.Millisecond), after)
	if l2.Slot() != r.l.Slot() || l2.ReadReserved() != 1000 {
		t.Fatalf("after %s the coordinator took %s reading reservation %d; want its old %s reading 1000",
			after, l2.Slot(), l2.ReadReserved(), r.l.Slot())
	}
}
