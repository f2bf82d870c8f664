package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors returned by every backend, checked with errors.Is.
var (
	// ErrLeaseLost: ownership of the worker ID is gone (expired, taken
	// over, released, or in doubt after a lost reply that could not be
	// confirmed). The holder must stop generating; it may acquire again.
	ErrLeaseLost = errors.New("coordinator: lease lost")
	// ErrLayoutMismatch: the generator's pin holds another layout.
	ErrLayoutMismatch = errors.New("coordinator: layout differs from the pinned layout")
	// ErrExhausted: every worker ID of the layout has a live owner or a
	// reservation too far ahead of the taker's clock.
	ErrExhausted = errors.New("coordinator: worker IDs exhausted")
	// ErrSchemaTooNew: the pin was written by a newer firn.
	ErrSchemaTooNew = errors.New("coordinator: pin schema is newer than this binary")
	// ErrUnavailable: the coordinator could not be reached in time.
	ErrUnavailable = errors.New("coordinator: unavailable")
	// ErrNameInUse: a live owner record carries this node's name with a
	// different instance ID.
	ErrNameInUse = errors.New("coordinator: node name held by another instance")
)

// SchemaVersion is the pin schema this binary writes and understands.
const SchemaVersion = 1

// NodeInfo describes the node taking a lease. The name is a label, never a
// credential: the instance ID identifies a data directory.
type NodeInfo struct {
	Name       string
	InstanceID string
	Address    string
	StartTime  time.Time
}

// Spec is what one generator asks of the coordinator. The coordinator knows
// nothing of ID generation: a layout is its canonical string, reservations
// are opaque, ordered int64 values (the generator's time field), and the
// caller says which reservation it can live with.
type Spec struct {
	// Generator names the ID space within the cluster.
	Generator string
	// Layout is the layout's canonical string, pinned at first use.
	Layout string
	// WorkerLimit is the number of worker IDs (1 << worker bits).
	WorkerLimit uint64
	// DatacenterLimit is the number of datacenter values (1 << datacenter
	// bits); 1 when the layout has no datacenter field.
	DatacenterLimit uint64
	// Datacenter fixes the datacenter value when >= 0 (it is then pinned
	// with the layout); -1 allocates it from the cursor with the worker.
	Datacenter int64
	// MaxFloor is the largest reservation R the taker accepts on a free
	// slot: its clock now plus max-lead, in time-field units. Slots with a
	// larger R are skipped.
	MaxFloor int64
	// LocalFloor is the node's own last reservation for this generator from
	// its data dir (-1 if none); the lease's Floor is at least this.
	LocalFloor int64
}

// Slot is one (datacenter, worker) pair handed out from the cursor.
type Slot struct {
	Datacenter uint64
	Worker     uint64
}

func (s Slot) String() string { return fmt.Sprintf("dc=%d worker=%d", s.Datacenter, s.Worker) }

// Heartbeat is what a holder writes with each reservation.
type Heartbeat struct {
	Node NodeInfo
	// Wall is the holder's clock reading when it wrote the heartbeat.
	Wall time.Time
}

// Holder is one worker slot's state, for `firn workers`.
type Holder struct {
	Slot      Slot
	Live      bool      // a live owner record exists
	Heartbeat Heartbeat // zero when not live
	Reserved  int64     // reserved[w]; -1 if never reserved
}

// PeerBeat is a live holder's heartbeat together with the local clock
// reading at which it was received, for the peer clock check.
type PeerBeat struct {
	Generator string
	Slot      Slot
	Heartbeat Heartbeat
	Received  time.Time
}

// Lease is one acquisition of one worker slot. It is shaped like etcd's
// concurrency.Session: Done and Ctx report liveness, but safety never waits
// on them — every write is fenced on still owning the slot.
type Lease interface {
	WorkerID() uint64
	Datacenter() uint64
	// Floor is the largest of the reservation read when ownership was
	// taken and Spec.LocalFloor: the holder never emits a time <= Floor.
	Floor() int64
	// Incarnation is the pin's random incarnation ID.
	Incarnation() string
	// Reserve durably raises reserved[w] to until (never lowers it) in a
	// write fenced on ownership; the heartbeat rides in the same write.
	// It returns ErrLeaseLost when ownership is gone or cannot be
	// confirmed. Only after it returns nil may times <= until be used.
	Reserve(ctx context.Context, until int64, hb Heartbeat) error
	// Reserved is the last reservation acknowledged by the coordinator.
	Reserved() int64
	// Done is closed when the lease is known lost or released.
	Done() <-chan struct{}
	// Ctx is cancelled when Done closes.
	Ctx() context.Context
	// Release, after the generator stopped, lowers reserved[w] to highest
	// (never below an issued ID, never below Floor) in the same fenced
	// write that frees ownership.
	Release(ctx context.Context, highest int64) error
}

// Coordinator hands out worker-ID leases and stores reservations.
type Coordinator interface {
	// Acquire checks or creates the layout pin, then takes the next free
	// slot in cursor order atomically with reading its reservation.
	Acquire(ctx context.Context, spec Spec, node NodeInfo) (Lease, error)
	// Workers lists every slot that has an owner or a reservation.
	Workers(ctx context.Context, generator string) ([]Holder, error)
	// ForceRelease frees a slot's ownership through the fenced path,
	// keeping its reservation.
	ForceRelease(ctx context.Context, generator string, slot Slot) error
	// Bump raises every reservation of every generator by by (in each
	// generator's time units, as the caller computes), after a restore.
	Bump(ctx context.Context, generator string, by int64) error
	// Peers returns live holders' heartbeats as received.
	Peers(ctx context.Context) ([]PeerBeat, error)
	Close() error
}
