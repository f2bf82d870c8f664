package coordinator

import (
	"fmt"
	"sort"
	"sync"
)

// EndedSlots remembers, per generator, the slots of a client's leases
// whose session ended (a ZooKeeper session expired or given up, an etcd
// lease lost) until the client takes them again. The next acquisition of
// the generator offers them first (Scan.Retake): the comparison with what
// the node acknowledged, which is how a restore of the coordinator shows,
// is made on the worker the node held, and a node on another worker would
// never see it. The zero value is empty and ready; it is safe for
// concurrent use.
type EndedSlots struct {
	mu sync.Mutex
	m  map[string]map[Slot]bool
}

// Add remembers slot of generator as held by a lease whose session ended.
func (e *EndedSlots) Add(generator string, slot Slot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]map[Slot]bool{}
	}
	if e.m[generator] == nil {
		e.m[generator] = map[Slot]bool{}
	}
	e.m[generator][slot] = true
}

// Forget drops slot of generator: taken again, or someone else's now.
func (e *EndedSlots) Forget(generator string, slot Slot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m := e.m[generator]; m != nil {
		delete(m, slot)
		if len(m) == 0 {
			delete(e.m, generator)
		}
	}
}

// EndedOwner is what an acquisition's scan shows of an ended slot's owner.
type EndedOwner struct {
	Owned    bool   // a live owner record exists
	Instance string // its instance ID
	Current  bool   // it belongs to the client's current session
}

// Sort sorts the ended slots of spec's generator by what the scan shows
// of each (owner): free ones are to be taken again first (retake, in
// spec's slot order); those whose owner record of the ended session
// carries node's instance ID are waiting — the servers have not expired
// that session yet, or a restored coordinator brought it back — and until
// the record goes (or ages into a take-back, which Plan offers) the
// acquisition takes no free worker. Slots outside spec, owned by another
// instance or by the current session, are forgotten.
func (e *EndedSlots) Sort(spec Spec, node NodeInfo, owner func(Slot) EndedOwner) (retake, waiting []Slot) {
	e.mu.Lock()
	slots := make([]Slot, 0, len(e.m[spec.Generator]))
	for s := range e.m[spec.Generator] {
		slots = append(slots, s)
	}
	e.mu.Unlock()
	sort.Slice(slots, func(i, j int) bool { return spec.Index(slots[i]) < spec.Index(slots[j]) })
	for _, s := range slots {
		if !spec.Contains(s) {
			e.Forget(spec.Generator, s)
			continue
		}
		switch o := owner(s); {
		case !o.Owned:
			retake = append(retake, s)
		case o.Instance != node.InstanceID || o.Current:
			e.Forget(spec.Generator, s) // someone else's now, or this session's
		default:
			waiting = append(waiting, s)
		}
	}
	return retake, waiting
}

// WaitingErr is the cause an acquisition gives while slot of an ended
// session is waiting (Sort): the backend wraps it as unavailable.
func WaitingErr(slot Slot) error {
	return fmt.Errorf("%s of an ended session of this node is still held by that session's owner record: "+
		"waiting for the coordinator to expire it, to take the worker again before any other", slot)
}
