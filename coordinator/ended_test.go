package coordinator

import (
	"slices"
	"testing"
)

// TestEndedSlotsSort: free ended slots are retaken in slot order; one
// whose owner record is still bound to the session that ended waits; one
// owned in any other session (another node's, the current one, another
// process of the same instance) or outside the spec is forgotten, and so
// is one taken again.
func TestEndedSlotsSort(t *testing.T) {
	spec := Spec{Generator: "g", Layout: "l", WorkerLimit: 4, DatacenterLimit: 1, Datacenter: -1}
	w := func(k uint64) Slot { return Slot{Worker: k} }
	const ended = 7
	var e EndedSlots
	for _, k := range []uint64{3, 0, 1, 2, 9} {
		e.Add("g", w(k), ended)
	}
	e.Add("other", w(0), ended)
	owners := map[Slot]EndedOwner{
		w(1): {Owned: true, Session: ended}, // the ended session's record: wait
		w(2): {Owned: true, Session: 8},     // another session's: a replacement, another node
		w(3): {Owned: true, Session: 9},     // this client's current session's
	}
	retake, waiting := e.Sort(spec, func(s Slot) EndedOwner { return owners[s] })
	if !slices.Equal(retake, []Slot{w(0)}) || !slices.Equal(waiting, []Slot{w(1)}) {
		t.Fatalf("retake %v waiting %v, want [%v] and [%v]", retake, waiting, w(0), w(1))
	}
	// Slots 2, 3 and 9 are forgotten: free now, they are not retaken.
	// Slot 1's record expires; slot 0 is taken again.
	owners = map[Slot]EndedOwner{}
	e.Forget("g", w(0))
	retake, waiting = e.Sort(spec, func(s Slot) EndedOwner { return owners[s] })
	if !slices.Equal(retake, []Slot{w(1)}) || len(waiting) != 0 {
		t.Fatalf("second sort: retake %v waiting %v, want [%v] and none", retake, waiting, w(1))
	}
	other := spec
	other.Generator = "other"
	if r, _ := e.Sort(other, func(Slot) EndedOwner { return EndedOwner{} }); !slices.Equal(r, []Slot{w(0)}) {
		t.Fatalf("other generator: retake %v, want [%v]", r, w(0))
	}
}
