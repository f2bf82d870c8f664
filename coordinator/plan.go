package coordinator

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Scan is a backend's reading of one generator's state in the terms every
// backend shares: what Plan decides from. Each backend fills it from its
// own read (etcd: one consistent range read; ZooKeeper: several reads,
// each decision re-checked by the versions in the acquiring multi; memory:
// the state under its lock) and then takes Plan's candidates in order,
// each in one fenced step of its own that re-checks what the plan relied
// on: the pin, the generator floor and the marker's absence unchanged, the
// slot still free (or still the stale record a take-back replaces), and
// the reservation read.
type Scan struct {
	// Pin is the generator's pin; nil when it has none yet (the backend
	// creates it, create-if-absent, and scans again before planning).
	Pin *Pin
	// Marker is the generator's restore marker; nil when none stands.
	Marker *RestoreEvidence
	// Cursor is where the walk over free slots starts.
	Cursor uint64
	// Floor is the generator floor a bump set; -1 when there is none.
	Floor int64
	// Owners are the live owner records in the backend's listing order
	// (NameInUseError names the first clash in this order, ExhaustedError
	// lists them in it). A slot appears at most once.
	Owners []Owner
	// Reserved holds reserved[slot] for every slot whose value the scan
	// read. A slot in neither Reserved nor Unread was never reserved (-1).
	Reserved map[Slot]int64
	// Unread holds the slots that have a reservation whose value the scan
	// did not read (ZooKeeper reads it in the take). Plan does not judge
	// them against a candidate's limit; the take must (Candidate.TooFar).
	Unread map[Slot]bool
	// Retake lists slots this client held in a session that ended (a
	// ZooKeeper session expired or given up, an etcd lease lost) and has
	// not taken again since, in the order to try them. Plan offers the
	// free ones before the walk, so that the reservation a restored
	// server shows for them is compared with what the node acknowledged.
	Retake []Slot
}

// Owner is one live owner record as scanned.
type Owner struct {
	Slot   Slot
	Record OwnerRecord
	// OwnSession: the record belongs to the taker's own current session
	// (ZooKeeper: an ephemeral node of this client's session), so a live
	// lease of this very client holds it and it is never taken back. A
	// backend whose records cannot tell this leaves it false.
	OwnSession bool
}

// ReservedOf is reserved[slot] as scanned: its value (-1: never
// reserved), and false when the scan did not read it (Unread).
func (s Scan) ReservedOf(slot Slot) (int64, bool) {
	if s.Unread[slot] {
		return -1, false
	}
	if r, ok := s.Reserved[slot]; ok {
		return r, true
	}
	return -1, true
}

// CandidateKind says why Plan offers a slot, and so how it is taken.
type CandidateKind int

const (
	// TakeBack is one's own stale owner record (same instance ID, its
	// heartbeat older than TakeBackAge on the taker's clock): a restart
	// before the old lease ran out. The take removes the old record,
	// guarded on exactly that record, and takes the slot anew (a new
	// ownership token: the old holder's fence must fail). It leaves the
	// cursor alone.
	TakeBack CandidateKind = iota + 1
	// Retake is a free slot of a session of this client that ended
	// (Scan.Retake). It leaves the cursor alone.
	Retake
	// Free is a free slot in cursor order; the take raises the cursor
	// past Pos.
	Free
)

func (k CandidateKind) String() string {
	switch k {
	case TakeBack:
		return "take-back"
	case Retake:
		return "retake"
	case Free:
		return "free"
	}
	return fmt.Sprintf("CandidateKind(%d)", int(k))
}

// Candidate is one slot Plan offers, in the order to try.
type Candidate struct {
	Kind CandidateKind
	Slot Slot
	// Pos is a Free candidate's cursor position: its take sets the cursor
	// to at least Pos+1. Zero for the other kinds.
	Pos uint64
	// Limit is the largest max(reserved[slot], generator floor) the taker
	// accepts: Spec.MaxFloor for a free slot, max(Spec.MaxFloor,
	// Spec.LocalFloor) for a take-back or a retake (the node's own slot:
	// its data dir already holds it back to its own last reservation).
	Limit int64
	// Reserved is reserved[slot] as scanned (-1: never reserved); when
	// Unread is set the scan did not read it, and the take reads it and
	// refuses the candidate if TooFar.
	Reserved int64
	Unread   bool
	// Owner is the stale record a TakeBack replaces; nil otherwise.
	Owner *Owner
}

// TooFar reports whether a slot with reservation reserved under generator
// floor floor is past the candidate's limit.
func (c Candidate) TooFar(reserved, floor int64) bool { return max(reserved, floor) > c.Limit }

// Contains reports whether slot is one of the spec's slots (in range, and
// in the fixed datacenter when there is one).
func (s Spec) Contains(slot Slot) bool {
	i := s.Index(slot)
	return i < s.Slots() && s.SlotAt(i) == slot
}

// errNoPin: a backend planned before it created the pin.
var errNoPin = errors.New("coordinator: no pin scanned")

// Plan is the slot-choice policy every backend shares, decided from a scan
// alone (it reads nothing and writes nothing). In order:
//
//   - a standing restore marker refuses (*RestoredError), before anything
//     else: a node with an empty data dir included;
//   - the pin must match the spec (*LayoutMismatchError, ErrSchemaTooNew);
//   - a live owner record carrying node's name with another instance ID
//     refuses (*NameInUseError, the first in listing order);
//   - then the candidates, none of them a slot in Spec.Held: the node's
//     own stale records first (TakeBack, in slot order; heartbeat older
//     than TakeBackAge on the taker's clock now, never one of its own
//     current session), then the free slots of
//     given-up sessions (Retake, in the scan's order), then every free slot
//     in cursor order from Scan.Cursor, wrapping once (Free). A slot whose
//     max(reservation, generator floor) is known to be past the
//     candidate's limit is left out; a free one is counted in
//     ExhaustedError.TooFar;
//   - no candidate at all is an *ExhaustedError naming the live holders
//     and, when it is what keeps free slots out, the generator floor.
//
// A retaken slot may come again in the walk, with the walk's limit.
func Plan(spec Spec, node NodeInfo, s Scan, now time.Time) ([]Candidate, error) {
	if s.Marker != nil {
		return nil, &RestoredError{Evidence: *s.Marker}
	}
	if s.Pin == nil {
		return nil, fmt.Errorf("%w for generator %q: create it before planning", errNoPin, spec.Generator)
	}
	if err := s.Pin.Check(spec); err != nil {
		return nil, err
	}
	for _, o := range s.Owners {
		if o.Record.Name == node.Name && o.Record.Instance != node.InstanceID {
			return nil, &NameInUseError{Name: node.Name, Slot: o.Slot, Instance: o.Record.Instance, Address: o.Record.Address}
		}
	}
	owned := make(map[Slot]bool, len(s.Owners))
	for _, o := range s.Owners {
		owned[o.Slot] = true
	}
	own := max(spec.MaxFloor, spec.LocalFloor)
	candidate := func(kind CandidateKind, slot Slot, pos uint64, limit int64) (Candidate, bool) {
		r, read := s.ReservedOf(slot)
		c := Candidate{Kind: kind, Slot: slot, Pos: pos, Limit: limit, Reserved: r, Unread: !read}
		return c, !read || !c.TooFar(r, s.Floor)
	}

	var cands []Candidate
	for i := range s.Owners {
		o := &s.Owners[i]
		if spec.NoTakeBack || o.OwnSession || o.Record.Instance != node.InstanceID || now.Sub(o.Record.Wall) <= TakeBackAge || !spec.Contains(o.Slot) || held(spec, o.Slot) {
			continue
		}
		if c, ok := candidate(TakeBack, o.Slot, 0, own); ok {
			c.Owner = o
			cands = append(cands, c)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return spec.Index(cands[i].Slot) < spec.Index(cands[j].Slot) })

	for _, slot := range s.Retake {
		if !spec.Contains(slot) || owned[slot] || held(spec, slot) {
			continue
		}
		if c, ok := candidate(Retake, slot, 0, own); ok {
			cands = append(cands, c)
		}
	}

	n := spec.Slots()
	tooFar := 0
	for i := uint64(0); i < n; i++ {
		pos := s.Cursor + i
		slot := spec.SlotAt(pos)
		if owned[slot] || held(spec, slot) {
			continue
		}
		c, ok := candidate(Free, slot, pos, spec.MaxFloor)
		if !ok {
			tooFar++
			continue
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		return nil, Exhausted(spec, s, tooFar)
	}
	return cands, nil
}

// Exhausted is the error for a scan in which no slot could be taken:
// tooFar free slots were past max-lead (Plan's count plus those a take
// found too far). Live lists every owner of the scan in listing order,
// with its reservation when the scan read it (-1 otherwise: a backend that
// reads lazily fills it in). Floor names the generator floor when it is
// past Spec.MaxFloor.
func Exhausted(spec Spec, s Scan, tooFar int) *ExhaustedError {
	e := &ExhaustedError{Generator: spec.Generator, Limit: spec.Slots(), TooFar: tooFar}
	if s.Floor > spec.MaxFloor {
		e.Floor = s.Floor
	}
	for _, o := range s.Owners {
		r, _ := s.ReservedOf(o.Slot)
		e.Live = append(e.Live, SlotState{Slot: o.Slot, Live: true, Heartbeat: o.Record.Heartbeat(), Reserved: r})
	}
	return e
}
