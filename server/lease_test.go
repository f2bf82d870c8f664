package server_test

import (
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/internal/testing/etcdtest"
	"github.com/firnid/firn/server/core"
)

// A lost lease takes only that generator out of serving; it acquires again
// with a new generator whose IDs are above the old one's, while the other
// generator serves on without a failed call.
func TestLostLeaseTakesOneGeneratorOut(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	// A short window keeps the wait for the node's own last reservation
	// (window − max-lead) short.
	n := startNode(t, e.Endpoints, t.TempDir(), generators("default=snowflake", "other=snowflake"),
		func(c *core.Config) {
			c.Timing.Timeout, c.Timing.ReservationWindow = 500*time.Millisecond, 2500*time.Millisecond
		})
	waitServing(t, n.ids, "default", 10*time.Second)
	waitServing(t, n.ids, "other", 10*time.Second)
	c := &caller{t: t, n: n, gen: "other"}
	c.batch(100)
	c.one()
	info := n.genInfo(t, "other")
	slot := coordinator.Slot{Datacenter: uint64(info.GetDatacenter()), Worker: uint64(info.GetWorker())}

	l := startLoad(t, n.ids, 2) // on the default generator
	insp := inspector(t, e.Endpoints, n.cfg.Cluster)
	if err := insp.ForceRelease(ctx(t), "other", slot); err != nil {
		l.finish()
		t.Fatalf("ForceRelease: %v", err)
	}
	waitNotServing(t, n.ids, "other", 5*time.Second)
	waitServing(t, n.ids, "other", 10*time.Second)
	l.finish()
	if len(l.errs) > 0 {
		t.Fatalf("%d of %d calls on the default generator failed while other lost its lease; first: %v", len(l.errs), l.calls.Load(), l.errs[0])
	}
	if len(l.broken) > 0 {
		t.Fatalf("default generator went backwards: %v", l.broken[0])
	}
	c.one()
	c.batch(100)
	increasing(t, "other across the lease loss", c.seen)

	holders, err := insp.Workers(ctx(t), "other")
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, h := range holders {
		if h.Live {
			live++
		}
	}
	if live != 1 {
		t.Fatalf("generator other: %d live leases after re-acquisition, want 1: %+v", live, holders)
	}
}
