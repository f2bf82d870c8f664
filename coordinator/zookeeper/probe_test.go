package zookeeper_test

import (
	"errors"
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/internal/testing/coordtest"
	"github.com/firnid/firn/internal/testing/zktest"
	"github.com/firnid/firn/segment"
)

// TestRestoredServerCounterThroughFreshSession: a standalone server is
// restored from a copy of its data taken before a segment claim. The
// restored server refuses every reconnect of the coordinator that made
// the claim (it has seen a later zxid), and will until that session has
// expired and the coordinator has given its client up — 20 s here. Yet
// that coordinator reads the restored counter within seconds, through a
// fresh session synced before its read: its claim is missing
// (coordinator.ReadFollowing: *CounterRolledBackError), it writes the
// restore marker the same way, and a fresh node's read finds the marker.
// This is what lets a node that saw the lost writes stop a fresh node's
// claims within the fresh node's settle (docs/design.md, Segment
// counters), whatever the session timeout.
func TestRestoredServerCounterThroughFreshSession(t *testing.T) {
	s := zktest.StartStandalone(t)
	const session = 20 * time.Second
	cl := newCluster(t, &zktest.Backend{Servers: []string{s.Addr}, TTL: session})
	c := cl.ConnectWith(t, sysClock, nil)
	spec := coordtest.CounterSpec("probe", 1, segment.MaxID)
	claim := func(n uint64, known segment.Mark) coordinator.Claim {
		t.Helper()
		cl, err := coordinator.ClaimSegment(ctxT(t, 10*time.Second), c, spec, n, 0, known, 0)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return cl
	}
	first := claim(1000, segment.Mark{})

	old := copyData(t, s)
	// The claim the copy misses: the coordinator's client has seen its zxid.
	var lost coordinator.Claim
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		lost, err = coordinator.ClaimSegment(ctxT(t, 5*time.Second), c, spec, 1000, 0, first.Record.State.Mark(), 0)
		if err == nil {
			break
		}
		if !errors.Is(err, coordinator.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("claim after the copy: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	known := lost.Record.State.Mark()

	restoreData(t, s, old)
	back := time.Now()

	// The node's periodic read, every 200 ms as after a failed one.
	var rb *coordinator.CounterRolledBackError
	for {
		_, err := coordinator.ReadFollowing(ctxT(t, 5*time.Second), c, spec, known)
		if errors.As(err, &rb) {
			break
		}
		if err == nil || !errors.Is(err, coordinator.ErrUnavailable) {
			t.Fatalf("read of the restored counter: %v, want *CounterRolledBackError or unavailable meanwhile", err)
		}
		if since := time.Since(back); since > session/2 {
			t.Fatalf("no read of the restored counter %v after the server came back (last: %v): the node that saw the lost claim "+
				"would notice only once its session (%v) expired, after a fresh node's claims had settled\nserver log:\n%s",
				since.Round(time.Millisecond), err, session, s.LogTail(15))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("restore found %v after the server came back: counter next %d, the node had written next %d",
		time.Since(back).Round(time.Millisecond), rb.Seen.Next, rb.Known.Next)
	if rb.Seen.Next != first.Record.State.Next || rb.Known != known {
		t.Fatalf("rolled back from %+v to next %d, want the copy's next %d", rb.Known, rb.Seen.Next, first.Record.State.Next)
	}
	ev := rb.Evidence(coordtest.Node("first"), time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	if err := c.MarkRestored(ctxT(t, 10*time.Second), ev); err != nil {
		t.Fatalf("MarkRestored while this client has no session: %v", err)
	}
	if time.Since(back) > session/2 {
		t.Fatalf("marker written %v after the server came back", time.Since(back).Round(time.Millisecond))
	}
	fresh := cl.Connect(t, sysClock)
	var re *coordinator.RestoredError
	if _, err := fresh.ReadCounter(ctxT(t, 10*time.Second), spec); !errors.As(err, &re) || re.Evidence != ev {
		t.Fatalf("a fresh node's read: %v, want *RestoredError with the evidence written", err)
	}
}
