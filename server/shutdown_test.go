package server_test

import (
	"testing"
	"time"

	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/coordinator/etcd/etcdtest"
	"github.com/firnid/firn/generator"
	firnv1 "github.com/firnid/firn/proto/firn/v1"
)

// Graceful Shutdown releases the lease and lowers the reservation to what
// was produced: a new node on the same data dir and coordinator serves at
// once (no wait for a lease to expire or for the clock to pass an
// unlowered reservation), and its IDs are above the old node's.
func TestShutdownReleasesAndLowers(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	dir := t.TempDir()
	snow, _ := generator.ParseLayout("snowflake")
	insp := inspector(t, e.Endpoints, "default")

	a := startNode(t, e.Endpoints, dir)
	waitServing(t, a.ids, "", 10*time.Second)
	resp, err := a.ids.NextIDs(ctx(t), &firnv1.NextIDsRequest{Count: 5000})
	if err != nil {
		t.Fatal(err)
	}
	lastA := resp.GetIds()[len(resp.GetIds())-1]
	info := a.genInfo(t, "")
	slot := coordinator.Slot{Datacenter: uint64(info.GetDatacenter()), Worker: uint64(info.GetWorker())}
	// While held, the reservation runs about a window ahead of the clock.
	holder := findHolder(t, insp, slot)
	wall := wallNow()
	if !holder.Live || holder.Reserved < snow.Units(wall)+3000 {
		t.Fatalf("while serving: holder %+v, clock at unit %d; want live and reserved ~5s ahead", holder, snow.Units(wall))
	}

	a.stop()
	holder = findHolder(t, insp, slot)
	now := snow.Units(wallNow())
	if holder.Live {
		t.Fatalf("after Shutdown the slot is still owned: %+v", holder)
	}
	if holder.Reserved > now+100 {
		t.Fatalf("after Shutdown reserved %d is %dms ahead of the clock: not lowered to what was produced", holder.Reserved, holder.Reserved-now)
	}
	if p, _ := snow.Decode(lastA); holder.Reserved < snow.Units(p.Time) {
		t.Fatalf("reservation %d lowered below the last issued ID's time %d", holder.Reserved, snow.Units(p.Time))
	}

	start := time.Now()
	b := startNode(t, e.Endpoints, dir)
	// At once: a lease left to expire would take the 5s TTL, an unlowered
	// data-dir reservation about 4s (window − max-lead).
	waitServing(t, b.ids, "", 2*time.Second)
	t.Logf("the second node served %v after its start", time.Since(start).Round(time.Millisecond))
	r, err := b.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetId() <= lastA {
		t.Fatalf("new node's ID %d is not above the old node's last %d", r.GetId(), lastA)
	}
}

func findHolder(t *testing.T, c coordinator.Coordinator, slot coordinator.Slot) coordinator.Holder {
	t.Helper()
	hs, err := c.Workers(ctx(t), "default")
	if err != nil {
		t.Fatalf("Workers: %v", err)
	}
	for _, h := range hs {
		if h.Slot == slot {
			return h
		}
	}
	t.Fatalf("slot %v not listed: %+v", slot, hs)
	return coordinator.Holder{}
}
