package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	firnv1 "github.com/firnid/firn/client/firnv1"
	"github.com/firnid/firn/coordinator"
	"github.com/firnid/firn/generator"
	"github.com/firnid/firn/internal/testing/etcdtest"
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
	waitServing(t, b.ids, "", 3*time.Second)
	t.Logf("the second node served %v after its start", time.Since(start).Round(time.Millisecond))
	r, err := b.ids.NextID(ctx(t), &firnv1.NextIDRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetId() <= lastA {
		t.Fatalf("new node's ID %d is not above the old node's last %d", r.GetId(), lastA)
	}
}

func findHolder(t *testing.T, c coordinator.Admin, slot coordinator.Slot) coordinator.SlotState {
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
	return coordinator.SlotState{}
}

// Shutdown under load: every call either completes or is refused as
// UNAVAILABLE (nothing hangs, nothing is cut short with another code), and
// what completed is unique.
func TestShutdownUnderLoad(t *testing.T) {
	e := etcdtest.StartEmbedded(t)
	n := startNode(t, e.Endpoints, t.TempDir())
	waitServing(t, n.ids, "", 10*time.Second)
	conn := dialGRPC(t, n.node.GRPCAddr(), insecure.NewCredentials())
	l := startLoad(t, firnv1.NewIDServiceClient(conn), 3)
	awaitCalls(t, &l.calls, 6) // under load before the fault
	start := time.Now()
	n.stop()
	took := time.Since(start)
	l.finish()
	if took > 10*time.Second {
		t.Fatalf("Shutdown under load took %v", took)
	}
	for _, err := range l.errs {
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("a call during Shutdown failed with %v, want Unavailable", err)
		}
	}
	if len(l.broken) > 0 {
		t.Fatalf("IDs went backwards: %v", l.broken[0])
	}
	seen := map[uint64]bool{}
	total := 0
	for _, s := range l.seqs {
		for _, id := range s {
			if seen[id] {
				t.Fatalf("ID %d issued twice", id)
			}
			seen[id] = true
			total++
		}
	}
	if total == 0 {
		t.Fatal("no call completed before Shutdown")
	}
}
