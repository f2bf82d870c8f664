package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/firnid/firn/segment"
)

// ErrCounterMoved: a SwapCounter found the stored counter no longer the
// record it was given (another claim, a hand-back or a bump came first).
// The claim is retried from the record returned with it.
var ErrCounterMoved = errors.New("coordinator: counter moved")

// CounterSpec is what a segment generator asks of the coordinator: its
// counter, pinned to its definition at first use.
type CounterSpec struct {
	Generator  string
	Definition segment.Definition
}

// PinSpec is the Spec whose pin a segment generator shares with snowflake
// generators: the definition's canonical string in place of the layout,
// so that a snowflake generator and a segment generator of one name, or
// two definitions, are refused naming both (*LayoutMismatchError).
func (s CounterSpec) PinSpec() Spec {
	return Spec{Generator: s.Generator, Layout: s.Definition.String(), Datacenter: -1}
}

// Validate refuses a spec no backend may store. Errors match
// ErrInvalidSpec.
func (s CounterSpec) Validate() error {
	if s.Generator == "" || len(s.Generator) > 128 || strings.ContainsAny(s.Generator, "/\x00") {
		return fmt.Errorf("%w: CounterSpec.Generator %q must be 1..128 bytes without '/'", ErrInvalidSpec, s.Generator)
	}
	if err := s.Definition.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	return nil
}

// CounterRecord is a generator's counter as read from the coordinator:
// the state, and what the backend compares a SwapCounter against.
type CounterRecord struct {
	State segment.Counter
	// Raw is the stored bytes (the etcd and memory backends compare them
	// whole); Version is the backend's version of the record (etcd's
	// ModRevision, ZooKeeper's znode version, the memory store's
	// revision).
	Raw     []byte
	Version int64
}

// Counters is what every backend offers segment generators. A claim is a
// read, then a compare-and-swap of the whole record: the fence. Of two
// claims from one record exactly one is written; the other gets
// ErrCounterMoved.
type Counters interface {
	// ReadCounter reads the generator's counter, creating the pin and a
	// counter at the definition's start if neither exists. It refuses
	// another pin (*LayoutMismatchError, ErrSchemaTooNew), a standing
	// restore marker (*RestoredError) and a stored counter that does not
	// decode or breaks its rules (segment.ErrCounter, naming the key).
	ReadCounter(ctx context.Context, spec CounterSpec) (CounterRecord, error)
	// SwapCounter writes next in place of prev, only while the stored
	// record is still prev, the pin unchanged and no restore marker
	// stands. It returns the written record; on ErrCounterMoved, the
	// record now stored (for the retry); *RestoredError while a marker
	// stands.
	SwapCounter(ctx context.Context, spec CounterSpec, prev CounterRecord, next segment.Counter) (CounterRecord, error)
	// BumpCounter clears a restore of the generator's counter (`firn
	// coordinator bump`): the stored counter raised by by IDs
	// (segment.Counter.Bump, stamped) and the restore marker deleted, in
	// one write guarded by what it read of both, so that a marker written
	// meanwhile stands. It reads the counter whether or not a marker
	// stands; a generator without a pin or a counter, or pinned to
	// another definition, is refused. A by of 0, one that would carry the
	// seq past 2^64-1, and one that does not lift next to what a standing
	// marker's node saw (CounterMinBump) are ErrInvalidSpec, nothing
	// written.
	BumpCounter(ctx context.Context, spec CounterSpec, by uint64) (CounterBump, error)
}

// CounterBump is what a BumpCounter did.
type CounterBump struct {
	Before, After segment.Counter
	Dropped       uint64           // free IDs the bump dropped
	Cleared       *RestoreEvidence // the marker cleared; nil: none stood
}

// BumpedCounter is the state a bump by by writes in place of raw, the
// stored counter of spec, read with marker, the generator's restore
// marker (nil: none): what every backend's BumpCounter writes. Refused
// with ErrInvalidSpec, naming --ids and the bound, before anything is
// written: a bump by 0; one that would carry the counter's seq past
// 2^64-1; one that leaves a segment generator's next below what the
// marker's node saw (CounterMinBump: the bump clears the marker, and IDs
// below it may have been handed out before the restore). The bumped
// counter is validated before it is returned.
func BumpedCounter(key string, spec CounterSpec, raw []byte, by uint64, marker *RestoreEvidence) (CounterBump, []byte, error) {
	if by == 0 {
		return CounterBump{}, nil, fmt.Errorf("%w: generator %q: a bump by 0 IDs", ErrInvalidSpec, spec.Generator)
	}
	rec, err := DecodeCounterRecord(key, spec, raw, 0)
	if err != nil {
		return CounterBump{}, nil, err
	}
	if err := rec.State.CheckBump(by); err != nil {
		return CounterBump{}, nil, fmt.Errorf("%w: generator %q: --ids %d: %v; nothing was written", ErrInvalidSpec, spec.Generator, by, err)
	}
	after, dropped := rec.State.Bump(spec.Definition, by)
	if need := CounterMinBump(spec, rec.State, marker); by < need {
		return CounterBump{}, nil, fmt.Errorf("%w: generator %q has a restore marker with a gap of %d IDs (node %q saw the counter at next %d, the coordinator showed %d): a bump by %d IDs (next %d to %d) does not cover it (--ids at least %d, plus the IDs claimed between the snapshot and the restore); nothing was written",
			ErrInvalidSpec, spec.Generator, marker.Gap(), marker.Node.Name, marker.Acked, marker.Shown, by, rec.State.Next, after.Next, need)
	}
	after = after.Stamp(WriteID())
	if err := after.Validate(spec.Definition); err != nil {
		return CounterBump{}, nil, fmt.Errorf("%w: generator %q: a bump by %d IDs would write an invalid counter: %v; nothing was written", ErrInvalidSpec, spec.Generator, by, err)
	}
	return CounterBump{Before: rec.State, After: after, Dropped: dropped}, after.Encode(), nil
}

// CounterMinBump is the least bump of a segment generator's counter c
// that covers marker, its restore marker (0: no marker, or not a counter's,
// or a sequence generator's, whose marker records no section maxima): the
// bumped next must reach the next the marker's node saw, below which IDs
// may have been handed out before the restore. A bump to past Max always
// covers it. It asks no less than 1.
func CounterMinBump(spec CounterSpec, c segment.Counter, marker *RestoreEvidence) uint64 {
	if marker == nil || !marker.Counter || spec.Definition.IsSeq() {
		return 0
	}
	seen := uint64(max(marker.Acked, 0))
	if marker.Acked == math.MaxInt64 {
		seen = segment.MaxID + 1 // Evidence clamps a used-up counter's next (2^63) to it
	}
	seen = min(seen, spec.Definition.Max+1)
	if seen <= c.Next {
		return 1
	}
	return seen - c.Next
}

// CounterRolledBackError says the coordinator showed a counter whose
// history lacks a write this node saw (segment.Counter.Follows): its seq
// below the one the node saw, or another write at that seq. It matches
// ErrRolledBack.
type CounterRolledBackError struct {
	Generator string
	Seen      segment.Counter // what the coordinator showed
	Known     segment.Mark    // the write this node saw
	Cause     error           // Follows' finding
}

func (e *CounterRolledBackError) Error() string {
	return fmt.Sprintf("coordinator state rolled back: generator %q: coordinator shows counter next %d seq %d, this node saw next %d seq %d: %v",
		e.Generator, e.Seen.Next, e.Seen.Seq, e.Known.Next, e.Known.Seq, e.Cause)
}

func (e *CounterRolledBackError) Is(target error) bool { return target == ErrRolledBack }

// Evidence is the restore marker's record of e: Acked and Shown are the
// counter's next ID as seen by the node and as shown.
func (e *CounterRolledBackError) Evidence(node NodeInfo, at time.Time) RestoreEvidence {
	// Next is at most 2^63 (MaxID+1, the definition used up): kept within
	// int64.
	clamp := func(v uint64) int64 { return int64(min(v, math.MaxInt64)) }
	return RestoreEvidence{Generator: e.Generator, Acked: clamp(e.Known.Next), Shown: clamp(e.Seen.Next), At: at, Node: node, Counter: true}
}

// Claim is one claim's outcome: the IDs claimed and the record written.
type Claim struct {
	Range  segment.Range
	Record CounterRecord
}

// WriteID draws a counter write's ID (segment.Counter.Stamp): random,
// nonzero.
func WriteID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// follows checks rec against the write a node saw (the zero Mark: none).
func follows(spec CounterSpec, rec CounterRecord, known segment.Mark) error {
	if err := rec.State.Follows(known); err != nil {
		return &CounterRolledBackError{Generator: spec.Generator, Seen: rec.State, Known: known, Cause: err}
	}
	return nil
}

// ReadFollowing reads spec's counter and checks that it continues the
// history in which known was written: *CounterRolledBackError when not.
// A node's periodic read: a restore is noticed without waiting for a
// claim.
func ReadFollowing(ctx context.Context, c Counters, spec CounterSpec, known segment.Mark) (CounterRecord, error) {
	rec, err := c.ReadCounter(ctx, spec)
	if err != nil {
		return CounterRecord{}, err
	}
	return rec, follows(spec, rec, known)
}

// ClaimSegment claims up to n IDs of spec's counter for a node whose
// claims so far lie below above (0: none) and that saw the write known
// (the zero Mark: none), adding lost to the counter's skipped IDs (what
// the node's previous process held unused when it stopped without
// handing back; 0 for none): read, claim (segment.Counter.Claim), stamp with
// a fresh write ID, compare-and-swap, again from the record returned
// while another claim moved the counter first. A record whose history
// lacks known is a restore: *CounterRolledBackError, nothing written.
// Errors of the backend (ErrUnavailable, *RestoredError, …) and
// segment.ErrExhausted are returned as they are.
func ClaimSegment(ctx context.Context, c Counters, spec CounterSpec, n, above uint64, known segment.Mark, lost uint64) (Claim, error) {
	rec, err := c.ReadCounter(ctx, spec)
	for {
		if err != nil {
			return Claim{}, err
		}
		if err := follows(spec, rec, known); err != nil {
			return Claim{}, err
		}
		r, next, cerr := rec.State.Claim(spec.Definition, n, above)
		if cerr != nil {
			return Claim{}, fmt.Errorf("generator %q: %w", spec.Generator, cerr)
		}
		next.Skipped += lost
		var written CounterRecord
		stamped := next.Stamp(WriteID())
		written, err = c.SwapCounter(ctx, spec, rec, stamped)
		if err == nil {
			return Claim{Range: r, Record: written}, nil
		}
		if errors.Is(err, ErrCounterMoved) {
			rec, err = written, nil
			continue
		}
		if errors.Is(err, ErrUnavailable) {
			// The write may have landed: its reply is what was lost.
			return Claim{}, &ClaimInDoubtError{Claim: Claim{Range: r, Record: CounterRecord{State: stamped}}, Err: err}
		}
	}
}

// ClaimInDoubtError is a claim whose write was sent and whose outcome is
// unknown (the coordinator unavailable before it answered). The write may
// have landed: its IDs are this node's if the counter's history holds the
// claim's write (ResolveClaim), and no other node's in any case.
type ClaimInDoubtError struct {
	Claim Claim // the range and the record written, if it landed
	Err   error
}

func (e *ClaimInDoubtError) Error() string {
	return fmt.Sprintf("claim of %v in doubt: %v", e.Claim.Range, e.Err)
}

func (e *ClaimInDoubtError) Unwrap() error { return e.Err }

// ResolveClaim reads spec's counter to learn whether the claim in doubt
// landed: landed when the counter's history holds its write ID at its
// seq (the record read is returned, to continue from), not when it holds
// another or the counter's seq is below it; unknown (ok false) when more
// than segment.HistLen writes came since. A history lacking known is a
// restore (*CounterRolledBackError).
func ResolveClaim(ctx context.Context, c Counters, spec CounterSpec, doubt Claim, known segment.Mark) (rec CounterRecord, landed, ok bool, err error) {
	rec, err = ReadFollowing(ctx, c, spec, known)
	if err != nil {
		return CounterRecord{}, false, false, err
	}
	want := doubt.Record.State.Mark()
	id, held := rec.State.WriteAt(want.Seq)
	switch {
	case rec.State.Seq < want.Seq:
		return rec, false, true, nil
	case !held:
		return rec, false, false, nil
	}
	return rec, id == want.ID, true, nil
}

// HandBackSegment returns r, a claim's unused remainder, to spec's
// counter (segment.Counter.HandBack), retrying while other writes move
// the counter. It returns the IDs dropped (the free list full) and the
// record written. A history lacking known (a restore) is
// *CounterRolledBackError: nothing is handed back, since a restored
// counter may already give r out again.
func HandBackSegment(ctx context.Context, c Counters, spec CounterSpec, r segment.Range, known segment.Mark) (uint64, CounterRecord, error) {
	return handBack(ctx, c, spec, r, known, nil)
}

// ErrUnconfirmed: a hand-back of a claim not confirmed yet found the
// counter's history without the claim's own write (a bump since, which
// starts the history again, or more writes than it keeps). Nothing was
// written; the claim's IDs are lost (skipped).
var ErrUnconfirmed = errors.New("coordinator: the counter's history no longer shows the claim's write")

// HandBackUnconfirmed is HandBackSegment for r, the remainder of a claim
// whose own write own was never confirmed by a read after its settle: r
// is handed back only while the record it writes over still holds own at
// own's seq, else ErrUnconfirmed. A claim made on a restored counter
// before the bump that cleared the restore may repeat IDs issued before
// the restore: handed back, the bumped counter would give them out again.
func HandBackUnconfirmed(ctx context.Context, c Counters, spec CounterSpec, r segment.Range, known, own segment.Mark) (uint64, CounterRecord, error) {
	return handBack(ctx, c, spec, r, known, &own)
}

// handBack is HandBackSegment, with the claim's own write checked on
// every record it writes over when own is set.
func handBack(ctx context.Context, c Counters, spec CounterSpec, r segment.Range, known segment.Mark, own *segment.Mark) (uint64, CounterRecord, error) {
	rec, err := c.ReadCounter(ctx, spec)
	for {
		if err != nil {
			return 0, CounterRecord{}, err
		}
		if err := follows(spec, rec, known); err != nil {
			return 0, CounterRecord{}, err
		}
		if own != nil {
			if !rec.State.Holds(*own) {
				return 0, CounterRecord{}, fmt.Errorf("%w: generator %q: hand-back of %v, claimed by the write at seq %d (the counter is at seq %d)",
					ErrUnconfirmed, spec.Generator, r, own.Seq, rec.State.Seq)
			}
		}
		next, dropped, herr := rec.State.HandBack(r)
		if herr != nil {
			return 0, CounterRecord{}, fmt.Errorf("generator %q: %w", spec.Generator, herr)
		}
		var written CounterRecord
		written, err = c.SwapCounter(ctx, spec, rec, next.Stamp(WriteID()))
		if err == nil {
			return dropped, written, nil
		}
		if errors.Is(err, ErrCounterMoved) {
			rec, err = written, nil
		}
	}
}

// DecodeCounterRecord decodes and validates a stored counter for spec;
// the error names the key.
func DecodeCounterRecord(key string, spec CounterSpec, raw []byte, version int64) (CounterRecord, error) {
	st, err := segment.DecodeCounter(raw)
	if err == nil {
		err = st.Validate(spec.Definition)
	}
	if err != nil {
		return CounterRecord{}, fmt.Errorf("counter %s: %w", key, err)
	}
	return CounterRecord{State: st, Raw: raw, Version: version}, nil
}

// Raised is one write of a sequence generator's section maxima: the
// record it replaced (Prev: each section's maximum before it) and the one
// written.
type Raised struct {
	Prev   segment.Counter
	Record CounterRecord
}

// RaiseSections writes each section s of raise a maximum of at least
// raise[s] in spec's counter (a sequence generator, segment.Counter.Raise),
// for a node that saw the write known: read, raise, stamp with a fresh
// write ID, compare-and-swap, again from the record returned while another
// write came first. A write is made even when no maximum rises (with
// always: a section's new owner makes one, which it confirms after the
// settle). A history lacking known is a restore
// (*CounterRolledBackError, nothing written). A write whose reply is lost
// returns the backend's error: a raise that landed unseen only raised.
func RaiseSections(ctx context.Context, c Counters, spec CounterSpec, raise map[int]uint64, known segment.Mark, always bool) (Raised, error) {
	rec, err := c.ReadCounter(ctx, spec)
	for {
		if err != nil {
			return Raised{}, err
		}
		if err := follows(spec, rec, known); err != nil {
			return Raised{}, err
		}
		next, rose := rec.State.Raise(raise)
		if !rose && !always {
			return Raised{Prev: rec.State, Record: rec}, nil
		}
		if !rose {
			next.Seq++
		}
		var written CounterRecord
		written, err = c.SwapCounter(ctx, spec, rec, next.Stamp(WriteID()))
		if err == nil {
			return Raised{Prev: rec.State, Record: written}, nil
		}
		if errors.Is(err, ErrCounterMoved) {
			rec, err = written, nil
		}
	}
}
