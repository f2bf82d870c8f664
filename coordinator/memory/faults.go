package memory

import (
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"time"
)

// Op is a kind of coordinator operation, as faults select them. Ops
// combine as a bit set.
type Op uint16

const (
	// OpAcquire is an acquisition: the session grant and the step that
	// scans and takes a slot.
	OpAcquire Op = 1 << iota
	// OpReserve is a holder's Reserve.
	OpReserve
	// OpRelease is a holder's Release.
	OpRelease
	// OpRenew is a session renewal, and the revoke at Close.
	OpRenew
	// OpMark is MarkRestored.
	OpMark
	// OpPeers is the read behind Peers (and, while it is not Available,
	// the heartbeats a client would be sent: its Peers answers from what
	// it had, as etcd's watch does).
	OpPeers
	// OpAdmin is Workers, ForceRelease, Bump, Generators and the
	// definitions (CreateDefinition, RetireDefinition, Definitions).
	OpAdmin
	// OpCounter is a segment generator's ReadCounter and SwapCounter.
	OpCounter

	// OpWrites are the writes whose replies LoseReplies can lose.
	OpWrites = OpAcquire | OpReserve | OpRelease | OpCounter
	// OpAll is every kind.
	OpAll = OpAcquire | OpReserve | OpRelease | OpRenew | OpMark | OpPeers | OpAdmin | OpCounter
)

// numOps is the number of single kinds.
const numOps = 8

var opNames = [numOps]string{"acquire", "reserve", "release", "renew", "mark", "peers", "admin", "counter"}

func (o Op) String() string {
	if o == 0 {
		return "none"
	}
	var names []string
	for i, n := range opNames {
		if o&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := o &^ OpAll; rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint16(rest)))
	}
	return strings.Join(names, "|")
}

// each calls f with every single kind in o, in order.
func (o Op) each(f func(i int)) {
	for o &= OpAll; o != 0; o &= o - 1 {
		f(bits.TrailingZeros16(uint16(o)))
	}
}

func (o Op) index() int { return bits.TrailingZeros16(uint16(o)) }

// Availability is how a coordinator answers an operation.
type Availability int

const (
	// Available: operations are served.
	Available Availability = iota
	// Hanging: an operation gets no answer; it fails with
	// coordinator.ErrUnavailable when its context ends or the store's call
	// Timeout passes, whichever comes first (a partition, a frozen
	// server). Renewals fail too, so sessions run out after their TTL.
	Hanging
	// Refusing: an operation fails at once with coordinator.ErrUnavailable
	// (a server down, its port closed).
	Refusing
)

func (a Availability) String() string {
	switch a {
	case Available:
		return "available"
	case Hanging:
		return "hanging"
	case Refusing:
		return "refusing"
	}
	return fmt.Sprintf("Availability(%d)", int(a))
}

// Faults are the faults injected into operations: one set for the whole
// store (Store.Faults) and one per client (Client.Faults); an operation
// suffers both (latencies add up, the worse availability wins, a lost
// reply is taken from the client's count first). Every method is safe for
// concurrent use, and the outcome depends only on the calls made: a lost
// reply is counted, never drawn at random.
type Faults struct {
	mu      sync.Mutex
	latency [numOps]time.Duration
	avail   [numOps]Availability
	lose    [numOps]int
}

// SetLatency delays every operation of the kinds in ops by d before it is
// applied (0 clears it). The delay ends early, failing the operation with
// coordinator.ErrUnavailable and applying nothing, when its context ends.
func (f *Faults) SetLatency(ops Op, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops.each(func(i int) { f.latency[i] = max(d, 0) })
}

// SetAvailability sets how operations of the kinds in ops are answered.
func (f *Faults) SetAvailability(ops Op, a Availability) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops.each(func(i int) { f.avail[i] = a })
}

// LoseReplies loses the replies of the next n writes of each kind in ops
// (acquisitions that took a slot, reservations and releases that passed
// the fence; other kinds are ignored): the write is applied, the caller
// gets coordinator.ErrUnavailable. n <= 0 clears the count.
func (f *Faults) LoseReplies(ops Op, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	(ops & OpWrites).each(func(i int) { f.lose[i] = max(n, 0) })
}

// Pending is how many replies of the kind op (a single kind) are still to
// be lost.
func (f *Faults) Pending(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lose[op.index()]
}

// Clear removes every fault.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency, f.avail, f.lose = [numOps]time.Duration{}, [numOps]Availability{}, [numOps]int{}
}

func (f *Faults) get(op Op) (time.Duration, Availability) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latency[op.index()], f.avail[op.index()]
}

// take consumes one lost reply of op, reporting whether there was one.
func (f *Faults) take(op Op) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := op.index(); f.lose[i] > 0 {
		f.lose[i]--
		return true
	}
	return false
}
