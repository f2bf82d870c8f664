package coordinator

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// EndedSlots remembers, per generator, the slots of a client's leases
// whose session ended (a ZooKeeper session expired or given up, an etcd
// lease lost, a memory session ended) until the client takes them again. The next acquisition of
// the generator offers them first (Scan.Retake): the comparison with what
// the node acknowledged, which is how a restore of the coordinator shows,
// is made on the worker the node held, and a node on another worker would
// never see it. The zero value is empty and ready; it is safe for
// concurrent use.
type EndedSlots struct {
	mu sync.Mutex
	m  map[string]map[Slot]int64 // generator: slot: the session it ended in
}

// Add remembers slot of generator as held by a lease whose session (the
// backend's own identity of it, as owner records carry it) ended.
func (e *EndedSlots) Add(generator string, slot Slot, session int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]map[Slot]int64{}
	}
	if e.m[generator] == nil {
		e.m[generator] = map[Slot]int64{}
	}
	e.m[generator][slot] = session
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

// EndedOwner is what an acquisition's scan shows of an ended slot's owner
// record.
type EndedOwner struct {
	Owned   bool  // a live owner record exists
	Session int64 // the session it is bound to
}

// Sort sorts the ended slots of spec's generator by what the scan shows
// of each (owner): free ones are to be taken again first (retake, in
// spec's slot order); those whose owner record is still bound to the very
// session that ended are waiting — the servers have not expired that
// session yet, or a restored coordinator brought it back — and until the
// record goes (or ages into a take-back, which Plan offers) the
// acquisition takes no free worker. Slots outside spec, or owned in any
// other session (another node's, this client's current one, or another
// process of the same instance: a replacement beside the zombie it
// replaced), are forgotten.
func (e *EndedSlots) Sort(spec Spec, owner func(Slot) EndedOwner) (retake, waiting []Slot) {
	e.mu.Lock()
	ended := make(map[Slot]int64, len(e.m[spec.Generator]))
	slots := make([]Slot, 0, len(e.m[spec.Generator]))
	for s, sess := range e.m[spec.Generator] {
		slots = append(slots, s)
		ended[s] = sess
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
		case o.Session == ended[s]:
			waiting = append(waiting, s)
		default:
			e.Forget(spec.Generator, s) // someone else's now, or this session's
		}
	}
	return retake, waiting
}

// ErrEndedWaiting matches WaitingErr's errors.
var ErrEndedWaiting = errors.New("an ended session's owner record stands")

// WaitingErr is the cause an acquisition gives while slot of an ended
// session is waiting (Sort): the backend wraps it as unavailable.
// RetryAcquire returns it at once rather than scan again: the caller
// tries again later with a fresh Spec (its Held slots may have changed
// meanwhile: a wide generator's other holders take workers).
func WaitingErr(slot Slot) error {
	return fmt.Errorf("%w: %s of an ended session of this node is still held by that session's owner record: "+
		"waiting for the coordinator to expire it, to take the worker again before any other", ErrEndedWaiting, slot)
}
