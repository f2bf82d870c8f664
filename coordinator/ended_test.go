package coordinator

import (
	"slices"
	"testing"
)

// TestEndedSlotsSort: free ended slots are retaken in slot order; one
// still owned by the node's instance in another session waits; one owned
// by another instance, by the current session or outside the spec is
// forgotten, and so is one taken again.
func TestEndedSlotsSort(t *testing.T) {
	spec := Spec{Generator: "g", Layout: "l", WorkerLimit: 4, DatacenterLimit: 1, Datacenter: -1}
	node := NodeInfo{Name: "n", InstanceID: "i"}
	w := func(k uint64) Slot { return Slot{Worker: k} }
	var e EndedSlots
	for _, k := range []uint64{3, 0, 1, 2, 9} {
		e.Add("g", w(k))
	}
	e.Add("other", w(0))
	owners := map[Slot]EndedOwner{
		w(1): {Owned: true, Instance: "i"},                // the ended session's record: wait
		w(2): {Owned: true, Instance: "someone-else"},     // taken by another node
		w(3): {Owned: true, Instance: "i", Current: true}, // this session's
	}
	retake, waiting := e.Sort(spec, node, func(s Slot) EndedOwner { return owners[s] })
	if !slices.Equal(retake, []Slot{w(0)}) || !slices.Equal(waiting, []Slot{w(1)}) {
		t.Fatalf("retake %v waiting %v, want [%v] and [%v]", retake, waiting, w(0), w(1))
	}
	// The forgotten ones are gone; the record of slot 1 expires, slot 0
	// is taken again.
	delete(owners, w(1))
	e.Forget("g", w(0))
	retake, waiting = e.Sort(spec, node, func(s Slot) EndedOwner { return owners[s] })
	if !slices.Equal(retake, []Slot{w(1)}) || len(waiting) != 0 {
		t.Fatalf("second sort: retake %v waiting %v, want [%v] and none", retake, waiting, w(1))
	}
	if r, _ := e.Sort(Spec{Generator: "other", Layout: "l", WorkerLimit: 4, DatacenterLimit: 1, Datacenter: -1}, node,
		func(Slot) EndedOwner { return EndedOwner{} }); !slices.Equal(r, []Slot{w(0)}) {
		t.Fatalf("other generator: retake %v, want [%v]", r, w(0))
	}
}
