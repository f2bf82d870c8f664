package coordinator

import (
	"context"
	"errors"
	"fmt"
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
}

// CounterRolledBackError says the coordinator showed a counter whose Seq
// lies below one this node saw acknowledged. It matches ErrRolledBack.
type CounterRolledBackError struct {
	Generator string
	Seen      segment.Counter
	Acked     segment.Counter
}

func (e *CounterRolledBackError) Error() string {
	return fmt.Sprintf("coordinator state rolled back: generator %q: coordinator shows counter next %d seq %d, this node saw next %d seq %d acknowledged",
		e.Generator, e.Seen.Next, e.Seen.Seq, e.Acked.Next, e.Acked.Seq)
}

func (e *CounterRolledBackError) Is(target error) bool { return target == ErrRolledBack }

// Evidence is the restore marker's record of e: Acked and Shown are the
// counter's Seq (what a bump must lift the stored Seq above).
func (e *CounterRolledBackError) Evidence(node NodeInfo, at time.Time) RestoreEvidence {
	return RestoreEvidence{Generator: e.Generator, Acked: int64(e.Acked.Seq), Shown: int64(e.Seen.Seq), At: at, Node: node}
}

// Claim is one claim's outcome: the IDs claimed and the record written.
type Claim struct {
	Range  segment.Range
	Record CounterRecord
}

// ClaimSegment claims up to n IDs of spec's counter for a node whose
// claims so far lie below above (0: none) and that saw acked acknowledged
// (its last written record; the zero Counter for none): read, claim
// (segment.Counter.Claim), compare-and-swap, again from the record
// returned while another claim moved the counter first. A record whose
// Seq lies below acked's is a restore: *CounterRolledBackError, nothing
// written. Errors of the backend (ErrUnavailable, *RestoredError, …) and
// segment.ErrExhausted are returned as they are.
func ClaimSegment(ctx context.Context, c Counters, spec CounterSpec, n, above uint64, acked segment.Counter) (Claim, error) {
	rec, err := c.ReadCounter(ctx, spec)
	for {
		if err != nil {
			return Claim{}, err
		}
		if rec.State.Seq < acked.Seq {
			return Claim{}, &CounterRolledBackError{Generator: spec.Generator, Seen: rec.State, Acked: acked}
		}
		r, next, cerr := rec.State.Claim(spec.Definition, n, above)
		if cerr != nil {
			return Claim{}, fmt.Errorf("generator %q: %w", spec.Generator, cerr)
		}
		var written CounterRecord
		written, err = c.SwapCounter(ctx, spec, rec, next)
		if err == nil {
			return Claim{Range: r, Record: written}, nil
		}
		if errors.Is(err, ErrCounterMoved) {
			rec, err = written, nil
		}
	}
}

// HandBackSegment returns r, a claim's unused remainder, to spec's
// counter (segment.Counter.HandBack), retrying while other writes move
// the counter. It returns the IDs dropped (the free list full) and the
// record written. A restore seen meanwhile (Seq below acked's) is
// *CounterRolledBackError: nothing is handed back, since a restored
// counter may already give r out again.
func HandBackSegment(ctx context.Context, c Counters, spec CounterSpec, r segment.Range, acked segment.Counter) (uint64, CounterRecord, error) {
	rec, err := c.ReadCounter(ctx, spec)
	for {
		if err != nil {
			return 0, CounterRecord{}, err
		}
		if rec.State.Seq < acked.Seq {
			return 0, CounterRecord{}, &CounterRolledBackError{Generator: spec.Generator, Seen: rec.State, Acked: acked}
		}
		next, dropped, herr := rec.State.HandBack(r)
		if herr != nil {
			return 0, CounterRecord{}, fmt.Errorf("generator %q: %w", spec.Generator, herr)
		}
		var written CounterRecord
		written, err = c.SwapCounter(ctx, spec, rec, next)
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
