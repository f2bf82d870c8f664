package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
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
	// ErrSchemaTooNew: the pin, or a generator's definition, was written
	// by a newer firn.
	ErrSchemaTooNew = errors.New("coordinator: record schema is newer than this binary")
	// ErrUnavailable: the coordinator could not be reached in time.
	ErrUnavailable = errors.New("coordinator: unavailable")
	// ErrNameInUse: a live owner record carries this node's name with a
	// different instance ID.
	ErrNameInUse = errors.New("coordinator: node name held by another instance")
	// ErrRolledBack: the coordinator shows a reservation below one this
	// node saw acknowledged (a restored snapshot, or a write behind the
	// node's back). The node must not serve until an operator bumps the
	// reservations. The text is the serving-state reason.
	ErrRolledBack = errors.New("coordinator state rolled back")
	// ErrRecreated: the generator's pin has another incarnation ID than the
	// one this node remembers (the coordinator's data was wiped). The text
	// is the serving-state reason.
	ErrRecreated = errors.New("coordinator state recreated")
	// ErrNotHeld: ForceRelease found no owner for the slot.
	ErrNotHeld = errors.New("coordinator: slot has no owner")
	// ErrInvalidSpec: a Spec or a configuration value is out of bounds; the
	// wrapping error names the field and the bound.
	ErrInvalidSpec = errors.New("coordinator: invalid argument")
	// ErrRestored: a generator-wide restore marker stands in the
	// coordinator; no node acquires for that generator until `firn
	// coordinator bump` clears it. The text is the serving-state reason.
	ErrRestored = errors.New("coordinator state restored from an older snapshot")
	// ErrAhead: a bump found reservations beyond its clock plus what
	// nodes reserve ahead (BumpSpec.MaxAhead), written by a clock ahead of
	// the caller's, and was not told to include them: nothing was written.
	ErrAhead = errors.New("coordinator: reservations ahead of the bump's clock")
)

// TakeBackAge is how old the heartbeat of a live owner record carrying the
// taker's own instance ID must be before Acquire takes that worker back (a
// restart after a crash, before the old lease expired). The age is measured
// on the taker's clock against the heartbeat's wall reading.
const TakeBackAge = 2 * time.Second

// LayoutMismatchError is returned by Acquire when the generator's pin holds
// another layout or another fixed datacenter. It matches ErrLayoutMismatch.
type LayoutMismatchError struct {
	Generator                          string
	Pinned, Wanted                     string // canonical layouts
	PinnedDatacenter, WantedDatacenter int64  // -1: allocated from the cursor
}

func (e *LayoutMismatchError) Error() string {
	if e.Pinned != e.Wanted {
		return fmt.Sprintf("coordinator: generator %q is pinned to layout %q, this node asks for %q",
			e.Generator, e.Pinned, e.Wanted)
	}
	return fmt.Sprintf("coordinator: generator %q is pinned to datacenter %d, this node asks for %d (-1: from the cursor)",
		e.Generator, e.PinnedDatacenter, e.WantedDatacenter)
}

func (e *LayoutMismatchError) Is(target error) bool { return target == ErrLayoutMismatch }

// ExhaustedError is returned by Acquire when no slot can be taken. It
// matches ErrExhausted and names the limit and the live holders.
type ExhaustedError struct {
	Generator string
	Limit     uint64      // number of slots (workers × datacenters, or workers)
	Live      []SlotState // slots with a live owner
	TooFar    int         // free slots skipped because R > Spec.MaxFloor
	// Floor is the generator floor a bump set, when it is what keeps
	// free slots past max-lead (-1 or 0 otherwise: not named).
	Floor int64
}

func (e *ExhaustedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coordinator: worker IDs exhausted for generator %q: limit %d, %d live holders, %d free slots reserved past max-lead",
		e.Generator, e.Limit, len(e.Live), e.TooFar)
	if e.Floor > 0 {
		fmt.Fprintf(&b, " (generator floor %d set by coordinator bump: serving resumes once the clock is within max-lead of it)", e.Floor)
	}
	for i, h := range e.Live {
		if i == 8 {
			fmt.Fprintf(&b, "; and %d more", len(e.Live)-i)
			break
		}
		fmt.Fprintf(&b, "; %s held by %q (%s)", h.Slot, h.Heartbeat.Node.Name, h.Heartbeat.Node.Address)
	}
	return b.String()
}

func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// NameInUseError is returned by Acquire when a live owner record of the
// generator carries this node's name with another instance ID. It matches
// ErrNameInUse.
type NameInUseError struct {
	Name     string
	Slot     Slot
	Instance string // the holder's instance ID
	Address  string // the holder's address
}

func (e *NameInUseError) Error() string {
	return fmt.Sprintf("coordinator: node name %q is held by instance %s at %q (%s)",
		e.Name, e.Instance, e.Address, e.Slot)
}

func (e *NameInUseError) Is(target error) bool { return target == ErrNameInUse }

// RolledBackError says which reservation went backwards. It matches
// ErrRolledBack.
type RolledBackError struct {
	Generator string
	Slot      Slot
	Seen      int64 // the coordinator's value
	Acked     int64 // the value this node saw acknowledged
}

func (e *RolledBackError) Error() string {
	return fmt.Sprintf("coordinator state rolled back: generator %q %s: coordinator shows reservation %d, this node saw %d acknowledged",
		e.Generator, e.Slot, e.Seen, e.Acked)
}

func (e *RolledBackError) Is(target error) bool { return target == ErrRolledBack }

// RecreatedError says that a generator's pin has another incarnation
// than the one a node's data dir knows: the coordinator's data was lost
// (and the pin made again), or the node points at another cluster than
// before. It matches ErrRecreated. Top is the highest reservation the node
// reserved or saw acknowledged under the incarnation it knew (-1: none):
// a node takes the new incarnation once a bump's generator floor lies
// above it.
type RecreatedError struct {
	Generator string
	Known     string // the incarnation the data dir knows
	Pin       string // the pin's
	Top       int64
}

func (e *RecreatedError) Error() string {
	return fmt.Sprintf("coordinator state recreated: generator %q: pin incarnation is %s, this data dir knows %s (the highest reservation this node reserved or saw acknowledged: %d)",
		e.Generator, e.Pin, e.Known, e.Top)
}

func (e *RecreatedError) Is(target error) bool { return target == ErrRecreated }

// RestoreEvidence is what a node found: the coordinator showed a
// reservation below one it had acknowledged (a restore from an older
// snapshot, or a write behind its back). MarkRestored stores it as the
// generator's restore marker.
type RestoreEvidence struct {
	Generator string
	Slot      Slot
	Acked     int64     // the reservation the node saw acknowledged
	Shown     int64     // what the coordinator showed (-1: absent)
	At        time.Time // the noticing node's clock reading
	Node      NodeInfo  // the noticing node (name, instance, address)
	// Counter: the evidence is a segment generator's counter, whose
	// history lacks a write the node saw (CounterRolledBackError); Acked
	// and Shown are then the counter's next ID as the node saw it and as
	// the coordinator showed it, and Slot is unused.
	Counter bool
}

// Gap is how far the coordinator fell behind, in time-field units: Acked
// - Shown (Acked+1 when Shown is -1, absent). A bump by Gap always covers
// the evidence; MinBump may ask less.
func (e RestoreEvidence) Gap() int64 {
	if e.Counter {
		// A forked history may show a next at or above the node's: the
		// evidence stands all the same.
		return max(e.Acked-e.Shown, 1)
	}
	if e.Shown < 0 {
		return e.Acked + 1
	}
	return e.Acked - e.Shown
}

// Covers reports whether a standing marker e covers evidence o, so that
// o need not replace it: a bump's check reads the marker's Acked alone
// (MinBump, CounterMinBump), so e covers o when it asks the bump to reach
// at least as high. (Not the larger Gap: evidence of an absent record
// counts its gap from the epoch, and would keep a marker whose Acked is
// below a later finding's, which a bump too small for that finding would
// then clear.)
func (e RestoreEvidence) Covers(o RestoreEvidence) bool { return e.Acked >= o.Acked }

// MinBump is the least bump, in time-field units, that covers the
// evidence when the bump's clock and every reservation stand at top or
// below. A bump sets the generator floor to at least top + By, and no
// acquisition issues a time at or below the floor, so a floor at Acked
// covers the evidence whatever the restored coordinator shows for the
// worker: no reservation (the snapshot predates the worker's first use),
// or an old or zero one (the gap would then count from near the layout's
// epoch and ask for years). It never asks more than Gap.
func (e RestoreEvidence) MinBump(top int64) int64 {
	return max(e.Acked-top, 1)
}

// Validate refuses evidence that cannot be a marker (no generator, no gap).
// Errors match ErrInvalidSpec.
func (e RestoreEvidence) Validate() error {
	switch {
	case e.Generator == "" || strings.ContainsAny(e.Generator, "/\x00") || len(e.Generator) > 128:
		return fmt.Errorf("%w: RestoreEvidence.Generator %q must be 1..128 bytes without '/'", ErrInvalidSpec, e.Generator)
	case e.Shown < -1:
		return fmt.Errorf("%w: RestoreEvidence.Shown %d must be >= -1", ErrInvalidSpec, e.Shown)
	case e.Gap() <= 0:
		return fmt.Errorf("%w: RestoreEvidence acknowledged %d, shown %d: no gap to record", ErrInvalidSpec, e.Acked, e.Shown)
	}
	return nil
}

// BumpCommand is the command that clears this evidence, with the gap in
// time-field units for D (the caller converts to a duration).
func (e RestoreEvidence) BumpCommand() string {
	return fmt.Sprintf("firn coordinator bump --generator %s --by D", e.Generator)
}

// RestoredError is returned by Acquire while a restore marker stands for
// the generator. It matches ErrRestored.
type RestoredError struct{ Evidence RestoreEvidence }

func (e *RestoredError) Error() string {
	ev := e.Evidence
	if ev.Counter {
		return fmt.Sprintf("coordinator state restored from an older snapshot: generator %q: the counter's history lacks a write node %q (instance %s, %s) saw (it saw next %d, the coordinator showed next %d), noticed at %s; no node claims from this generator until it is cleared: run %s, with N (IDs) above every ID issued before the restore",
			ev.Generator, ev.Node.Name, ev.Node.InstanceID, ev.Node.Address, ev.Acked, ev.Shown,
			ev.At.UTC().Format(time.RFC3339Nano), fmt.Sprintf("firn coordinator bump --generator %s --ids N", ev.Generator))
	}
	shown := fmt.Sprint(ev.Shown)
	if ev.Shown < 0 {
		shown = "no reservation"
	}
	return fmt.Sprintf("coordinator state restored from an older snapshot: generator %q %s: the coordinator showed %s where node %q (instance %s, %s) had reservation %d acknowledged, noticed at %s; no node acquires for this generator until it is cleared: run %s, with D covering at least %d time units plus the writes the snapshot missed",
		ev.Generator, ev.Slot, shown, ev.Node.Name, ev.Node.InstanceID, ev.Node.Address, ev.Acked,
		ev.At.UTC().Format(time.RFC3339Nano), ev.BumpCommand(), ev.Gap())
}

func (e *RestoredError) Is(target error) bool { return target == ErrRestored }

// GeneratorState is one generator of the cluster as stored, for admin
// commands.
type GeneratorState struct {
	Name    string
	Pin     Pin              // zero (Layout "") when the generator has no pin
	Floor   int64            // -1: no floor set
	Restore *RestoreEvidence // nil: no marker
}

// BumpSpec is one generator's bump after a restore.
type BumpSpec struct {
	Generator string
	By        int64 // units, > 0
	Now       int64 // the caller's clock in units, >= 0
	// MaxTime is the layout's last time value: a floor beyond it is
	// refused before anything is written.
	MaxTime int64
	// MaxAhead, when positive, is how far past Now (in units) a
	// reservation may stand: what a node keeps reserved ahead of its clock
	// (the reservation window, and max-lead) plus the clock skew allowed
	// between the caller and the nodes. A reservation beyond Now+MaxAhead
	// was written by a clock ahead of the caller's, and the generator
	// floor, max(Now, every reservation) + By, would carry that lead to
	// every worker of the generator. Unless IncludeAhead, Bump then refuses
	// with an *AheadError naming each such worker and its live holder,
	// before anything is written (CheckAhead). A reservation at or below
	// the generator floor is never ahead: an earlier bump raised it, and
	// the nodes wait for that floor already. 0: no check.
	MaxAhead     int64
	IncludeAhead bool
}

// Validate checks a BumpSpec; errors match ErrInvalidSpec and name the
// field.
func (b BumpSpec) Validate() error {
	switch {
	case b.Generator == "" || strings.ContainsAny(b.Generator, "/\x00") || len(b.Generator) > 128:
		return fmt.Errorf("%w: BumpSpec.Generator %q must be 1..128 bytes without '/'", ErrInvalidSpec, b.Generator)
	case b.By <= 0:
		return fmt.Errorf("%w: bump %d must be positive", ErrInvalidSpec, b.By)
	case b.Now < 0:
		return fmt.Errorf("%w: bump at time %d: must be >= 0", ErrInvalidSpec, b.Now)
	case b.MaxTime <= 0:
		return fmt.Errorf("%w: BumpSpec.MaxTime %d must be positive (the layout's last time value)", ErrInvalidSpec, b.MaxTime)
	case b.MaxAhead < 0:
		return fmt.Errorf("%w: BumpSpec.MaxAhead %d must be >= 0", ErrInvalidSpec, b.MaxAhead)
	}
	return nil
}

// AheadLimit is the largest reservation the bump takes without being told
// to (IncludeAhead), given the generator floor (-1: none), and whether
// there is one (MaxAhead > 0): Now + MaxAhead, or the floor when higher.
func (b BumpSpec) AheadLimit(floor int64) (int64, bool) {
	if b.MaxAhead <= 0 {
		return 0, false
	}
	if b.MaxAhead > math.MaxInt64-b.Now {
		return math.MaxInt64, true
	}
	return max(b.Now+b.MaxAhead, floor), true
}

// CheckAhead refuses the bump, with an *AheadError, when a reservation of
// slots stands beyond AheadLimit(floor) and the bump was not told to
// include it. slots are the generator's reservations as the backend read
// them for the floor, each with its live owner's heartbeat when it has one
// (Live); floor is the generator floor read with them (-1: none). Backends
// call it before they write anything, on the same reading as BumpFloor.
func (b BumpSpec) CheckAhead(slots []SlotState, floor int64) error {
	limit, ok := b.AheadLimit(floor)
	if !ok || b.IncludeAhead {
		return nil
	}
	var ahead []SlotState
	for _, h := range slots {
		if h.Reserved > limit {
			ahead = append(ahead, h)
		}
	}
	if len(ahead) == 0 {
		return nil
	}
	sort.Slice(ahead, func(i, j int) bool {
		a, c := ahead[i].Slot, ahead[j].Slot
		return a.Datacenter < c.Datacenter || (a.Datacenter == c.Datacenter && a.Worker < c.Worker)
	})
	return &AheadError{Generator: b.Generator, Now: b.Now, MaxAhead: b.MaxAhead, Limit: limit, Floor: floor, Ahead: ahead}
}

// AheadError is a bump refused because reservations stand beyond its
// clock plus what nodes reserve ahead (BumpSpec.CheckAhead): a node whose
// clock is ahead wrote them, and the floor would make every node of the
// generator wait that lead out. Nothing was written. It matches ErrAhead.
type AheadError struct {
	Generator string
	Now       int64 // the bump's clock, in units
	MaxAhead  int64 // BumpSpec.MaxAhead
	Limit     int64 // the largest reservation taken without IncludeAhead
	Floor     int64 // the generator floor (-1: none); Limit when higher than Now + MaxAhead
	// Ahead are the slots reserved past Limit, with their live owner's
	// heartbeat (Live false: no live owner).
	Ahead []SlotState
}

func (e *AheadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coordinator: generator %q: %d reservation(s) beyond the bump's clock %d plus what nodes reserve ahead", e.Generator, len(e.Ahead), e.Now)
	if e.Floor >= 0 {
		fmt.Fprintf(&b, " and the generator floor %d", e.Floor)
	}
	fmt.Fprintf(&b, " (limit %d), written by a clock ahead of this one: ", e.Limit)
	for i, h := range e.Ahead {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s reserved %d (%d ahead), %s", h.Slot, h.Reserved, h.Reserved-e.Now, h.HolderName())
	}
	b.WriteString("; nothing was written: wait until the clock is within the limit of them, or include them (the generator floor then follows them)")
	return b.String()
}

func (e *AheadError) Is(target error) bool { return target == ErrAhead }

// BumpFloor is the floor a bump of b sets over the largest of its clock and
// every reservation (top), refused with ErrInvalidSpec, naming the
// generator and the bound, when it would pass MaxTime (or overflow) or
// when a restore marker stands whose gap By does not cover. Backends call
// it before they write anything.
func (b BumpSpec) BumpFloor(top int64, marker *RestoreEvidence) (int64, error) {
	top = max(top, b.Now)
	if marker != nil && marker.Counter {
		// Raising reservations and the floor leaves a segment
		// generator's counter where the restore left it: clearing its
		// marker here would let the next claim hand out again what
		// nodes handed out before the restore.
		return 0, fmt.Errorf("%w: generator %q has a restore marker of a segment generator's counter (node %q saw next %d, the coordinator showed %d): bump the counter (BumpCounter: firn coordinator bump picks it by the generator's pin); nothing was written",
			ErrInvalidSpec, b.Generator, marker.Node.Name, marker.Acked, marker.Shown)
	}
	if marker != nil && b.By < marker.MinBump(top) {
		return 0, fmt.Errorf("%w: generator %q has a restore marker with a gap of %d time units (node %q saw %d acknowledged, the coordinator showed %d): a bump by %d does not cover it (at least %d)",
			ErrInvalidSpec, b.Generator, marker.Gap(), marker.Node.Name, marker.Acked, marker.Shown, b.By, marker.MinBump(top))
	}
	if top > b.MaxTime-b.By {
		return 0, fmt.Errorf("%w: generator %q: a floor of %d + %d is past the layout's last time value %d (the floor is never lowered: it would stop the generator for good); nothing was written",
			ErrInvalidSpec, b.Generator, top, b.By, b.MaxTime)
	}
	return top + b.By, nil
}

// BumpResult is what a bump did.
type BumpResult struct {
	Floor   int64            // the generator floor after the bump
	Cleared *RestoreEvidence // the marker the bump cleared, if any
}

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
	// Held are the slots the taker holds leases of already (a wide
	// generator's other workers, including one whose lease may have ended
	// without its holder knowing yet): never offered, neither as free nor
	// as the taker's own stale record. It is the taking process's own
	// knowledge, never sent anywhere (not part of the JSON form).
	Held map[Slot]bool `json:"-"`
	// NoTakeBack leaves out the taker's own stale records: only free
	// slots are taken. A sequence generator's sections ask it: a record
	// whose heartbeat is old may still belong to a live process of the
	// same instance (a zombie beside its replacement) that answers for
	// the section until its lease ends (Lease.Assured).
	NoTakeBack bool `json:"-"`
}

// Slot is one (datacenter, worker) pair handed out from the cursor.
type Slot struct {
	Datacenter uint64
	Worker     uint64
}

func (s Slot) String() string { return fmt.Sprintf("dc=%d worker=%d", s.Datacenter, s.Worker) }

// Key is the slot's name in the coordinator's keys and paths
// (owner/<dc>-<w>, reserved/<dc>-<w>): both decimal, no padding.
func (s Slot) Key() string {
	return strconv.FormatUint(s.Datacenter, 10) + "-" + strconv.FormatUint(s.Worker, 10)
}

// ParseSlotKey reads a slot's name as Key writes it, and nothing else: a
// name in another form ("01-2", "+1-2", "1-2-3") is not a slot, so no two
// names can stand for one slot.
func ParseSlotKey(name string) (Slot, bool) {
	d, w, ok := strings.Cut(name, "-")
	if !ok {
		return Slot{}, false
	}
	dc, err1 := strconv.ParseUint(d, 10, 64)
	wk, err2 := strconv.ParseUint(w, 10, 64)
	s := Slot{Datacenter: dc, Worker: wk}
	return s, err1 == nil && err2 == nil && s.Key() == name
}

// Slots is the number of slots the cursor walks: WorkerLimit, times
// DatacenterLimit when the datacenter comes from the cursor.
func (s Spec) Slots() uint64 {
	if s.Datacenter >= 0 {
		return s.WorkerLimit
	}
	return s.WorkerLimit * s.DatacenterLimit
}

// SlotAt is the slot at cursor position pos (any non-negative position;
// it wraps at Slots). Workers vary fastest: dc 0 workers 0..W-1, then dc 1.
func (s Spec) SlotAt(pos uint64) Slot {
	i := pos % s.Slots()
	if s.Datacenter >= 0 {
		return Slot{Datacenter: uint64(s.Datacenter), Worker: i}
	}
	return Slot{Datacenter: i / s.WorkerLimit, Worker: i % s.WorkerLimit}
}

// Index is the inverse of SlotAt within one lap.
func (s Spec) Index(slot Slot) uint64 {
	if s.Datacenter >= 0 {
		return slot.Worker
	}
	return slot.Datacenter*s.WorkerLimit + slot.Worker
}

// maxSlots bounds the slot space a coordinator will walk (2^22 covers every
// layout with at most 22 node bits).
const maxSlots = 1 << 22

// Validate checks a Spec; errors match ErrInvalidSpec and name the field.
func (s Spec) Validate() error {
	switch {
	case s.Generator == "" || strings.ContainsAny(s.Generator, "/\x00") || len(s.Generator) > 128:
		return fmt.Errorf("%w: Spec.Generator %q must be 1..128 bytes without '/'", ErrInvalidSpec, s.Generator)
	case s.Layout == "":
		return fmt.Errorf("%w: Spec.Layout is empty", ErrInvalidSpec)
	case s.WorkerLimit < 1:
		return fmt.Errorf("%w: Spec.WorkerLimit %d must be at least 1", ErrInvalidSpec, s.WorkerLimit)
	case s.DatacenterLimit < 1:
		return fmt.Errorf("%w: Spec.DatacenterLimit %d must be at least 1", ErrInvalidSpec, s.DatacenterLimit)
	case s.Datacenter < -1 || (s.Datacenter >= 0 && uint64(s.Datacenter) >= s.DatacenterLimit):
		return fmt.Errorf("%w: Spec.Datacenter %d must be -1 or in [0, %d)", ErrInvalidSpec, s.Datacenter, s.DatacenterLimit)
	case s.WorkerLimit > maxSlots || s.DatacenterLimit > maxSlots || s.Slots() > maxSlots:
		return fmt.Errorf("%w: Spec slots %d×%d exceed %d", ErrInvalidSpec, s.WorkerLimit, s.DatacenterLimit, maxSlots)
	case s.MaxFloor < 0:
		return fmt.Errorf("%w: Spec.MaxFloor %d must be >= 0", ErrInvalidSpec, s.MaxFloor)
	case s.LocalFloor < -1:
		return fmt.Errorf("%w: Spec.LocalFloor %d must be >= -1", ErrInvalidSpec, s.LocalFloor)
	}
	return nil
}

// Heartbeat is what a holder writes with each reservation.
type Heartbeat struct {
	Node NodeInfo
	// Wall is the holder's clock reading when it wrote the heartbeat.
	Wall time.Time
}

// SlotState is one worker slot's state, for `firn workers`.
type SlotState struct {
	Slot      Slot
	Live      bool      // a live owner record exists
	Heartbeat Heartbeat // zero when not live
	Reserved  int64     // reserved[w]; -1 if never reserved
}

// HolderName says who holds the slot, for messages: `held by node "n2"
// (10.0.0.2:7300)`, or that no live node does.
func (h SlotState) HolderName() string {
	if !h.Live {
		return "no live holder (its owner record is gone)"
	}
	return fmt.Sprintf("held by node %q (%s)", h.Heartbeat.Node.Name, h.Heartbeat.Node.Address)
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
	// Slot is (Datacenter(), WorkerID()).
	Slot() Slot
	// ReadReserved is the reservation R read in the step that took
	// ownership (-1 if the slot was never reserved), before LocalFloor is
	// applied: the node-local state compares it with the last R it saw
	// acknowledged for this slot.
	ReadReserved() int64
	// GeneratorFloor is the generator floor (set by a bump) read in the
	// step that took ownership, -1 if none: with ReadReserved, what the
	// coordinator vouches for this slot.
	GeneratorFloor() int64
	// Floor is the largest of the reservation read when ownership was
	// taken and Spec.LocalFloor: the holder never emits a time <= Floor.
	Floor() int64
	// Incarnation is the pin's random incarnation ID.
	Incarnation() string
	// Reserve durably raises reserved[w] to until (never lowers it) in a
	// write fenced on ownership; the heartbeat rides in the same write.
	// It returns ErrLeaseLost when ownership is gone or cannot be
	// confirmed, ErrUnavailable (ownership in doubt: treat as not
	// extended) on a timeout, and a RolledBackError when the value it
	// replaced was below one already acknowledged to this lease (the write
	// still raised it). Only after it returns nil may times <= until be
	// used. until must be >= 0.
	Reserve(ctx context.Context, until int64, hb Heartbeat) error
	// Reserved is the last reservation acknowledged by the coordinator.
	Reserved() int64
	// Assured is how long from now the coordinator keeps this ownership
	// at least, whatever this process does from here on: the TTL counted
	// from when the last renewal the coordinator acknowledged was sent
	// (etcd: the lease's keepalive; ZooKeeper: any request of the
	// session); 0 once the lease is known lost. A holder that answers
	// only while it is above a margin never answers after another holder
	// could have taken the slot, even when paused in between (a sequence
	// generator's sections, docs/design.md Per-key sequences). Once it
	// has run out it stays 0 for the lease, whatever renewals follow: the
	// ownership may have ended in between, and a restore can bring the
	// coordinator's lease or session back.
	Assured() time.Duration
	// Done is closed when the lease is known lost or released.
	Done() <-chan struct{}
	// Ctx is cancelled when Done closes.
	Ctx() context.Context
	// Release, after the generator stopped, lowers reserved[w] to highest
	// (never below an issued ID, never below Floor) in the same fenced
	// write that frees ownership.
	Release(ctx context.Context, highest int64) error
}

// Coordinator is the runtime part of a coordinator, what a node uses: it
// hands out worker-ID leases (whose writes store the reservations),
// records restore evidence, and reports peers' heartbeats.
type Coordinator interface {
	// Acquire checks or creates the layout pin, then takes a slot chosen
	// by Plan (one's own stale slot first, then the next free slot in
	// cursor order) atomically with reading its reservation and checking
	// that no restore marker stands (*RestoredError otherwise).
	Acquire(ctx context.Context, spec Spec, node NodeInfo) (Lease, error)
	// MarkRestored writes the generator's restore marker with ev, or
	// replaces a standing one only when ev has a larger Gap (idempotent).
	// While it stands, Acquire for that generator returns a
	// *RestoredError, checked atomically with taking ownership.
	MarkRestored(ctx context.Context, ev RestoreEvidence) error
	// Peers returns live holders' heartbeats as received.
	Peers(ctx context.Context) ([]PeerBeat, error)
	Close() error
}

// Admin is the administrative part of a coordinator: what `firn workers`
// and `firn coordinator bump` use.
type Admin interface {
	// Workers lists every slot that has an owner or a reservation.
	Workers(ctx context.Context, generator string) ([]SlotState, error)
	// ForceRelease frees a slot's ownership through the fenced path,
	// keeping its reservation.
	ForceRelease(ctx context.Context, generator string, slot Slot) error
	// Bump, after a restore, raises every reservation of the generator by
	// b.By (to at least the value it read plus b.By: a write whose answer
	// was lost is not applied twice) and the generator's floor to
	// max(b.Now, every reservation) +
	// b.By (in its time units, as the caller computes from the pinned
	// layout; the floor is never lowered). Every later acquisition's Floor
	// is at least the generator floor, so a worker first used after the
	// restored snapshot was taken, and so absent from it, also starts
	// above anything it may have issued. A floor past b.MaxTime, and a
	// By below the gap of a standing restore marker, are refused
	// (ErrInvalidSpec) before anything is written; so is, with
	// b.MaxAhead and without b.IncludeAhead, a reservation beyond
	// b.Now + b.MaxAhead (*AheadError, naming each such worker and its
	// live holder: b.CheckAhead on the reading the floor is computed
	// from). Last it deletes the
	// marker it read, guarded by the revision or version read: a marker
	// re-written meanwhile stands, and Bump then returns an error matching
	// ErrRestored with the result. Call it once per generator.
	Bump(ctx context.Context, b BumpSpec) (BumpResult, error)
	// Generators lists every generator of this cluster (with a pin, a
	// floor or a restore marker), sorted by name.
	Generators(ctx context.Context) ([]GeneratorState, error)
}

// Backend is what every backend (etcd, ZooKeeper, memory, and Lazy over
// any of them) implements: the four parts.
type Backend interface {
	Coordinator
	Admin
	Counters
	Definitions
}
