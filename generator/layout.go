package generator

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxIDBits is the widest an ID may be: the sign bit is never set.
const MaxIDBits = 63

// MinLifetime is how long, from now, a layout's time field must last.
// (One widely used layout ran out in production in 2024.)
const MinLifetime = 10 * 365 * 24 * time.Hour

// Layout describes how a 64-bit ID is cut into fields, from the top:
//
//	[zero bits][time][datacenter][worker][sequence]   (Order NodeSeq, the default)
//	[zero bits][time][sequence][datacenter][worker]   (Order SeqNode, as Sony's sonyflake packs)
//
// The time field counts Units since Epoch. The widths add up to at most 63
// bits; the bits above them, the sign bit included, are always zero. Time
// is always on top, so IDs sort by time whatever the order below it.
type Layout struct {
	// Epoch is the instant whose time field is 0. It must not lie in the
	// future.
	Epoch time.Time
	// Unit is the length of one tick of the time field (1 ms for
	// snowflake). At least 1µs, at most 1h.
	Unit time.Duration
	// TimeBits is the width of the time field; at least 1.
	TimeBits uint8
	// DatacenterBits is the width of the datacenter field; may be 0.
	DatacenterBits uint8
	// WorkerBits is the width of the worker field; may be 0 only when the
	// datacenter field is not.
	WorkerBits uint8
	// SequenceBits is the width of the per-unit sequence; at least 1.
	SequenceBits uint8
	// Order is the order of the fields below time (default NodeSeq).
	Order Order
}

// Order is the order of the fields below the time field.
type Order uint8

const (
	// NodeSeq: datacenter, worker, then sequence at the bottom; the IDs
	// of one worker in one unit are consecutive integers.
	NodeSeq Order = iota
	// SeqNode: sequence, then datacenter and worker at the bottom (Sony's
	// sonyflake: time, sequence, machine); the IDs of one worker in one
	// unit step by 1 << (dc + worker bits).
	SeqNode
)

// String is the order as the canonical layout form writes it.
func (o Order) String() string {
	if o == SeqNode {
		return "time-seq-dc-worker"
	}
	return "time-dc-worker-seq"
}

// Errors returned by layouts, checked with errors.Is.
var (
	// ErrLayout marks every refusal by Validate and ParseLayout.
	ErrLayout = errors.New("generator: invalid layout")
	// ErrField marks an Encode argument too wide for its field.
	ErrField = errors.New("generator: value does not fit its field")
	// ErrBadID marks an ID that Decode refuses.
	ErrBadID = errors.New("generator: invalid ID")
)

// LayoutError names the field of a refused layout and the bound it broke.
type LayoutError struct {
	Field  string
	Reason string
}

func (e *LayoutError) Error() string {
	return fmt.Sprintf("generator: invalid layout: %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrLayout) true.
func (e *LayoutError) Is(target error) bool { return target == ErrLayout }

func layoutErr(field, format string, args ...any) error {
	return &LayoutError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// TotalBits is the number of bits the fields use.
func (l Layout) TotalBits() int {
	return int(l.TimeBits) + int(l.DatacenterBits) + int(l.WorkerBits) + int(l.SequenceBits)
}

// MaxTime is the largest value of the time field.
func (l Layout) MaxTime() int64 { return int64(maxOf(l.TimeBits)) }

// MaxSequence is the largest sequence number within one unit.
func (l Layout) MaxSequence() uint64 { return maxOf(l.SequenceBits) }

// WorkerLimit is the number of worker IDs (1 << WorkerBits).
func (l Layout) WorkerLimit() uint64 { return 1 << l.WorkerBits }

// DatacenterLimit is the number of datacenter values (1 << DatacenterBits).
func (l Layout) DatacenterLimit() uint64 { return 1 << l.DatacenterBits }

// PerUnit is the number of IDs one worker can issue in one unit.
func (l Layout) PerUnit() uint64 { return 1 << l.SequenceBits }

// Rate is one worker's sustained limit in IDs per second.
func (l Layout) Rate() float64 { return float64(l.PerUnit()) * float64(time.Second) / float64(l.Unit) }

// End is the first instant the layout serves no more: where its time
// field runs out, or, for a layout that outlives them, where firn's
// arithmetic does — a time.Duration after the epoch (about 292 years:
// units are counted from the epoch in nanoseconds), and the last instant
// of Unix nanoseconds (April 2262). An epoch so old that the clock today
// lies past its Duration is refused by Validate as a layout that ran out.
func (l Layout) End() time.Time {
	end := l.Epoch.Add(math.MaxInt64) // saturates at a Duration from the epoch
	if unixEnd := time.Unix(0, math.MaxInt64); unixEnd.Before(end) {
		end = unixEnd
	}
	if l.Unit <= 0 {
		return l.Epoch
	}
	n := uint64(l.MaxTime()) + 1
	if hi, lo := bits.Mul64(n, uint64(l.Unit)); hi == 0 && lo <= math.MaxInt64 {
		if f := l.Epoch.Add(time.Duration(lo)); f.Before(end) {
			end = f
		}
	}
	return end
}

// Units returns the time-field value of the wall time t: whole units since
// the epoch, rounded down. The result may be negative or past MaxTime; it is
// not checked here.
func (l Layout) Units(t time.Time) int64 {
	d := t.Sub(l.Epoch)
	u := int64(d / l.Unit)
	if d < 0 && d%l.Unit != 0 {
		u--
	}
	return u
}

// UnitStart returns the instant at which time-field value u begins.
func (l Layout) UnitStart(u int64) time.Time { return l.Epoch.Add(time.Duration(u) * l.Unit) }

// Validate checks the layout against the clock reading now (time is an
// argument: this package does not read the wall clock). It refuses, naming
// the field and the bound: widths over 63 bits, a zero-width field that must
// not be zero, a unit outside [1µs, 1h], an epoch in the future or so far
// back that units counted from it in nanoseconds run out within
// MinLifetime, and a time field that runs out within MinLifetime of now.
func (l Layout) Validate(now time.Time) error {
	switch {
	case l.TimeBits == 0:
		return layoutErr("time", "width must be at least 1 bit")
	case l.SequenceBits == 0:
		return layoutErr("seq", "width must be at least 1 bit")
	case l.WorkerBits == 0 && l.DatacenterBits == 0:
		return layoutErr("worker", "width must be at least 1 bit when dc is 0")
	case l.TimeBits > 62:
		return layoutErr("time", "width %d exceeds 62 bits", l.TimeBits)
	case l.SequenceBits > 32:
		return layoutErr("seq", "width %d exceeds 32 bits", l.SequenceBits)
	case l.WorkerBits > 32:
		return layoutErr("worker", "width %d exceeds 32 bits", l.WorkerBits)
	case l.DatacenterBits > 32:
		return layoutErr("dc", "width %d exceeds 32 bits", l.DatacenterBits)
	case l.Order > SeqNode:
		return layoutErr("order", "%d is not an order (want %s or %s)", l.Order, NodeSeq, SeqNode)
	case l.TotalBits() > MaxIDBits:
		return layoutErr("bits", "time+dc+worker+seq = %d exceeds %d bits", l.TotalBits(), MaxIDBits)
	case l.Unit < time.Microsecond:
		return layoutErr("unit", "%v is below the minimum 1µs", l.Unit)
	case l.Unit > time.Hour:
		return layoutErr("unit", "%v is above the maximum 1h", l.Unit)
	case l.Epoch.IsZero():
		return layoutErr("epoch", "must be set")
	case l.Epoch.After(now):
		return layoutErr("epoch", "%s is in the future (now %s)", formatTime(l.Epoch), formatTime(now))
	}
	if span := l.Epoch.Add(math.MaxInt64); span.Before(now.Add(MinLifetime)) {
		return layoutErr("epoch", "%s is too far back: units are counted from the epoch in nanoseconds, which run out at %s, within %d years of now",
			formatTime(l.Epoch), formatTime(span), int(MinLifetime/(365*24*time.Hour)))
	}
	if end := l.End(); end.Before(now.Add(MinLifetime)) {
		return layoutErr("time", "%d bits of %v from epoch %s run out at %s, within %d years of now",
			l.TimeBits, l.Unit, formatTime(l.Epoch), formatTime(end), int(MinLifetime/(365*24*time.Hour)))
	}
	return nil
}

// String returns the canonical form, which ParseLayout reads back:
//
//	time=41,dc=5,worker=5,seq=12,unit=1ms,epoch=2010-11-04T01:42:54.657Z
//
// A layout in the SeqNode order ends in ",order=time-seq-dc-worker"; the
// default order is not written, so the canonical form (and every pin of
// it) of a layout in that order is what it always was.
func (l Layout) String() string {
	s := fmt.Sprintf("time=%d,dc=%d,worker=%d,seq=%d,unit=%s,epoch=%s",
		l.TimeBits, l.DatacenterBits, l.WorkerBits, l.SequenceBits, l.Unit, formatTime(l.Epoch))
	if l.Order != NodeSeq {
		s += ",order=" + l.Order.String()
	}
	return s
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ParseLayout reads a preset name (see Presets) or the canonical form
// written by String. Keys may come in any order; dc defaults to 0, unit to
// 1ms and order to time-dc-worker-seq; epoch is RFC 3339 or Unix
// milliseconds. The result is not validated against a clock: call
// Validate.
func ParseLayout(s string) (Layout, error) {
	s = strings.TrimSpace(s)
	if l, ok := Preset(s); ok {
		return l, nil
	}
	if to, ok := renamedPresets[s]; ok {
		return Layout{}, layoutErr("layout", "preset %q was renamed %q (it never was %s)", s, to.name, to.why)
	}
	if !strings.Contains(s, "=") {
		return Layout{}, layoutErr("layout", "%q is neither a preset (%s) nor key=value pairs",
			s, strings.Join(PresetNames(), ", "))
	}
	l := Layout{Unit: time.Millisecond}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Layout{}, layoutErr("layout", "%q is not key=value", part)
		}
		k = strings.TrimSpace(k)
		v = strings.TrimSpace(v)
		if seen[k] {
			return Layout{}, layoutErr(k, "given twice")
		}
		seen[k] = true
		switch k {
		case "time", "dc", "worker", "seq":
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil || n > MaxIDBits {
				return Layout{}, layoutErr(k, "%q is not a width from 0 to %d", v, MaxIDBits)
			}
			switch k {
			case "time":
				l.TimeBits = uint8(n)
			case "dc":
				l.DatacenterBits = uint8(n)
			case "worker":
				l.WorkerBits = uint8(n)
			case "seq":
				l.SequenceBits = uint8(n)
			}
		case "unit":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Layout{}, layoutErr("unit", "%q is not a positive duration", v)
			}
			l.Unit = d
		case "epoch":
			t, err := parseEpoch(v)
			if err != nil {
				return Layout{}, layoutErr("epoch", "%q is neither RFC 3339 nor Unix milliseconds", v)
			}
			l.Epoch = t
		case "order":
			switch v {
			case NodeSeq.String():
				l.Order = NodeSeq
			case SeqNode.String():
				l.Order = SeqNode
			default:
				return Layout{}, layoutErr("order", "%q is not %s or %s", v, NodeSeq, SeqNode)
			}
		default:
			return Layout{}, layoutErr(k, "unknown key (want time, dc, worker, seq, unit, epoch, order)")
		}
	}
	for _, k := range []string{"time", "worker", "seq", "epoch"} {
		if !seen[k] {
			return Layout{}, layoutErr(k, "missing")
		}
	}
	return l, nil
}

func parseEpoch(v string) (time.Time, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms < 0 || ms > 1<<43 {
			return time.Time{}, errors.New("out of range")
		}
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// Presets (docs/design.md; README, Layouts).
var presets = map[string]Layout{
	// The classic Twitter layout.
	"snowflake": {Epoch: time.UnixMilli(1288834974657).UTC(), Unit: time.Millisecond,
		TimeBits: 41, DatacenterBits: 5, WorkerBits: 5, SequenceBits: 12},
	// Sony's sonyflake exactly: 10 ms units from its default start time,
	// then an 8-bit sequence, then the 16-bit machine ID at the bottom.
	// IDs made by sony/sonyflake decode with it.
	"sonyflake": {Epoch: time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC), Unit: 10 * time.Millisecond,
		TimeBits: 39, WorkerBits: 16, SequenceBits: 8, Order: SeqNode},
	// Many workers at modest rates: 1 s units (68 years from 2026), a
	// 19-bit worker field for fleets that take a fresh worker ID often,
	// 8,192 IDs per second per worker.
	"wideworker": {Epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Unit: time.Second,
		TimeBits: 31, WorkerBits: 19, SequenceBits: 13},
	// 42-bit IDs for low-rate uses such as user IDs.
	"compact": {Epoch: time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC), Unit: time.Second,
		TimeBits: 32, WorkerBits: 4, SequenceBits: 6},
}

// renamedPresets are names that no longer resolve, and why.
var renamedPresets = map[string]struct{ name, why string }{
	"uidgen": {"wideworker", "Baidu UidGenerator's layout (28-bit seconds from 2016, run out in 2024)"},
}

// Preset returns the named preset layout.
func Preset(name string) (Layout, bool) {
	l, ok := presets[name]
	return l, ok
}

// PresetNames lists the preset names in order.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func maxOf(width uint8) uint64 { return 1<<width - 1 }

// Parts are the fields of one ID.
type Parts struct {
	// Units is the raw time field; Time is the instant it begins.
	Units      int64
	Time       time.Time
	Datacenter uint64
	Worker     uint64
	Sequence   uint64
}

// Encode builds an ID from its fields. It never masks: a time below 0 or
// past MaxTime, or a datacenter, worker or sequence too wide for its field,
// is an error.
func (l Layout) Encode(units int64, datacenter, worker, seq uint64) (uint64, error) {
	switch {
	case units < 0 || units > l.MaxTime():
		return 0, fmt.Errorf("%w: time %d outside [0, %d]", ErrField, units, l.MaxTime())
	case datacenter > maxOf(l.DatacenterBits):
		return 0, fmt.Errorf("%w: datacenter %d exceeds %d (%d bits)", ErrField, datacenter, maxOf(l.DatacenterBits), l.DatacenterBits)
	case worker > maxOf(l.WorkerBits):
		return 0, fmt.Errorf("%w: worker %d exceeds %d (%d bits)", ErrField, worker, maxOf(l.WorkerBits), l.WorkerBits)
	case seq > maxOf(l.SequenceBits):
		return 0, fmt.Errorf("%w: sequence %d exceeds %d (%d bits)", ErrField, seq, maxOf(l.SequenceBits), l.SequenceBits)
	}
	return l.encode(units, datacenter, worker, seq), nil
}

// encode assumes every field fits.
func (l Layout) encode(units int64, datacenter, worker, seq uint64) uint64 {
	return uint64(units)<<(l.DatacenterBits+l.WorkerBits+l.SequenceBits) |
		l.nodeBits(datacenter, worker) | seq<<l.seqShift()
}

// seqShift is the position of the sequence field.
func (l Layout) seqShift() uint8 {
	if l.Order == SeqNode {
		return l.DatacenterBits + l.WorkerBits
	}
	return 0
}

// nodeBits is the datacenter and worker fields in place.
func (l Layout) nodeBits(datacenter, worker uint64) uint64 {
	shift := l.SequenceBits
	if l.Order == SeqNode {
		shift = 0
	}
	return datacenter<<(l.WorkerBits+shift) | worker<<shift
}

// Decode splits an ID into its fields. An ID that sets bits above the
// layout's fields (the sign bit included) is an error.
func (l Layout) Decode(id uint64) (Parts, error) {
	total := l.TotalBits()
	if total < 64 && id>>uint(total) != 0 {
		return Parts{}, fmt.Errorf("%w: %d sets bits above the layout's %d bits", ErrBadID, id, total)
	}
	var seq, worker, dc uint64
	if l.Order == SeqNode {
		worker = id & maxOf(l.WorkerBits)
		id >>= l.WorkerBits
		dc = id & maxOf(l.DatacenterBits)
		id >>= l.DatacenterBits
		seq = id & maxOf(l.SequenceBits)
		id >>= l.SequenceBits
	} else {
		seq = id & maxOf(l.SequenceBits)
		id >>= l.SequenceBits
		worker = id & maxOf(l.WorkerBits)
		id >>= l.WorkerBits
		dc = id & maxOf(l.DatacenterBits)
		id >>= l.DatacenterBits
	}
	units := int64(id)
	return Parts{Units: units, Time: l.UnitStart(units), Datacenter: dc, Worker: worker, Sequence: seq}, nil
}
