package zookeeper_test

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/zookeeper"
	"github.com/firnid/firn/internal/testing/coordtest"
)

// TestPeersOwnerDirInTheGap: a generator's node is created before its
// owner directory (two creates), so the watches behind Peers can list
// the directory, find it absent, and see it appear before they set the
// watch for its creation. That watch is then set on the directory's data,
// which never changes: Peers must list the directory at once instead of
// waiting on it, or it never reports the generator's holders (a flake of
// TestRestoredServerBehindClient under load). The directory is created in
// that gap here on purpose.
func TestPeersOwnerDirInTheGap(t *testing.T) {
	b := standalone(t)
	cl := newCluster(t, b)
	obs := cl.ConnectWith(t, sysClock, nil)
	base := cl.Base() + "/late"
	acl := cl.ACL()
	gap := make(chan error, 1)
	zookeeper.SetAfterNoNode(obs, func(path string) {
		if path != base+"/owner" {
			return
		}
		_, err := cl.Admin().Create(path, nil, 0, acl)
		if errors.Is(err, zk.ErrNodeExists) {
			err = nil
		}
		select {
		case gap <- err:
		default:
		}
	})
	if _, err := obs.Peers(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// The generator's node alone, as the coordinator's first create
	// leaves it.
	if _, err := cl.Admin().Create(base, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-gap:
		if err != nil {
			t.Fatalf("creating the owner directory in the gap: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Peers' watches never found the owner directory absent")
	}

	other := cl.Connect(t, sysClock)
	n := coordtest.Node("late")
	l := acquire(t, other, coordtest.Spec("late", 2), n)
	waitPeer(t, obs, "late", l, n, 10*time.Second, "Peers never reported the holder of a generator whose owner directory appeared in the gap")
}

// waitPeer reserves on l (its holder's heartbeat) until c's Peers reports
// l's slot of generator gen, failing with msg and what Peers returned
// after within.
func waitPeer(t *testing.T, c coordinator.Coordinator, gen string, l coordinator.Lease, n coordinator.NodeInfo, within time.Duration, msg string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for k := int64(1); ; k++ {
		reserve(t, l, 100*k, n)
		ps, err := c.Peers(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Generator == gen && p.Slot == l.Slot() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v", msg, ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
