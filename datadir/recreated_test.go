package datadir

import (
	"errors"
	"testing"

	"github.com/firnid/firn/coordinator"
)

// TestRecreatedPinAdoptedUnderABump: a pin with another incarnation than
// the one this data dir knows (the coordinator's data lost, or another
// cluster) is refused naming the highest reservation this node reserved
// or saw acknowledged, until a bump's generator floor lies above it: the
// operator handled the loss, and the node adopts the new incarnation.
// Before, a recreated pin was refused for good: no bump let the node
// serve again, and nothing said what would.
func TestRecreatedPinAdoptedUnderABump(t *testing.T) {
	s, _ := Open(t.TempDir())
	g, _ := s.Generator("g")
	slot := coordinator.Slot{Datacenter: 1, Worker: 2}
	if err := g.Check(fakeLease{slot: slot, read: -1, genFloor: -1, incarnation: "inc-1"}); err != nil {
		t.Fatalf("first check: %v", err)
	}
	if err := g.BeforeReserve(slot, 7000); err != nil {
		t.Fatal(err)
	}
	g.Acked(slot, 5000)

	other := coordinator.Slot{Worker: 3} // never held: no acknowledged value of its own
	err := g.Check(fakeLease{slot: other, read: -1, genFloor: 6000, incarnation: "inc-2"})
	var rc *coordinator.RecreatedError
	if !errors.Is(err, coordinator.ErrRecreated) || !errors.As(err, &rc) || rc.Top != 7000 {
		t.Fatalf("recreated pin, floor 6000 below the node's last reservation 7000: %v, want a RecreatedError naming 7000", err)
	}
	if got := g.Incarnation(); got != "inc-1" {
		t.Fatalf("a refused check adopted incarnation %q", got)
	}
	if err := g.Check(fakeLease{slot: other, read: -1, genFloor: 7000, incarnation: "inc-2"}); err != nil {
		t.Fatalf("recreated pin under a bump's floor at 7000, above everything this node reserved: %v, want adopted", err)
	}
	if got := g.Incarnation(); got != "inc-2" {
		t.Fatalf("after the bump the data dir knows incarnation %q, want inc-2", got)
	}
	// Adopted: the new incarnation's own rules apply from now on.
	if err := g.Check(fakeLease{slot: slot, read: -1, genFloor: 7000, incarnation: "inc-2"}); err != nil {
		t.Fatalf("the held slot under the floor after adopting: %v", err)
	}
}
