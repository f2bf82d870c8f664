package clockguard

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is firn's clock source. One call returns two readings taken at the
// same instant:
//
//   - wall: the wall-clock time, with no monotonic component, so that adding
//     an offset to it moves the wall reading only;
//   - mono: a monotonic reading (time since an arbitrary origin fixed for the
//     life of the clock), used only to size steps of the wall clock.
//
// The generator and the ring buffer declare the same method set, so any
// Clock here satisfies them without an import.
type Clock interface {
	Now() (wall time.Time, mono time.Duration)
}

// System is the machine's clock. It is the only place in firn that reads the
// wall clock.
type System struct {
	origin time.Time
}

// NewSystem returns the machine's clock with its monotonic origin at the
// moment of the call.
func NewSystem() *System { return &System{origin: time.Now()} }

// Now implements Clock with a single read of the system clock.
func (s *System) Now() (time.Time, time.Duration) {
	t := time.Now()
	return t.Round(0), t.Sub(s.origin)
}

// FastMono returns the monotonic reading alone, with one clock read instead
// of the two that Now makes. The generator uses it to extrapolate the wall
// clock for at most a millisecond between full readings.
func (s *System) FastMono() (time.Duration, bool) { return time.Since(s.origin), true }

// Fake is a manual clock for tests. Its wall and monotonic readings move
// together with Advance, and the wall reading alone with Step or SetWall
// (a step of the wall clock, as settimeofday would make). The zero value is
// not usable: create one with NewFake.
type Fake struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

// NewFake returns a fake clock whose wall reading is start and whose
// monotonic reading is zero.
func NewFake(start time.Time) *Fake { return &Fake{wall: start.Round(0)} }

// Now implements Clock.
func (f *Fake) Now() (time.Time, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wall, f.mono
}

// Advance moves real time forward by d: both readings move.
func (f *Fake) Advance(d time.Duration) {
	if d < 0 {
		panic("clockguard: Fake.Advance with a negative duration; use Step")
	}
	f.mu.Lock()
	f.wall = f.wall.Add(d)
	f.mono += d
	f.mu.Unlock()
}

// Step moves the wall reading by d (forward or back) without moving the
// monotonic reading: a clock step.
func (f *Fake) Step(d time.Duration) {
	f.mu.Lock()
	f.wall = f.wall.Add(d)
	f.mu.Unlock()
}

// SetWall sets the wall reading without moving the monotonic reading.
func (f *Fake) SetWall(t time.Time) {
	f.mu.Lock()
	f.wall = t.Round(0)
	f.mu.Unlock()
}

// Offset is a clock whose wall reading is its base clock's plus a settable
// offset; the monotonic reading is the base clock's, untouched. It is the
// fault-injection clock: a change of offset is, to everything above it, a
// step of the wall clock.
type Offset struct {
	base   Clock
	offset atomic.Int64 // nanoseconds
}

// NewOffset returns an Offset clock over base with the given initial offset.
func NewOffset(base Clock, initial time.Duration) *Offset {
	o := &Offset{base: base}
	o.offset.Store(int64(initial))
	return o
}

// Now implements Clock.
func (o *Offset) Now() (time.Time, time.Duration) {
	wall, mono := o.base.Now()
	// wall carries no monotonic reading (every Clock strips it), so Add
	// moves the wall reading only.
	return wall.Add(time.Duration(o.offset.Load())), mono
}

// FastMono passes on the base clock's monotonic-only reading, when it has
// one: the offset moves the wall reading only, so it does not change it.
func (o *Offset) FastMono() (time.Duration, bool) {
	if f, ok := o.base.(interface {
		FastMono() (time.Duration, bool)
	}); ok {
		return f.FastMono()
	}
	return 0, false
}

// SetOffset sets the offset (absolute, not cumulative; 0 clears it).
func (o *Offset) SetOffset(d time.Duration) { o.offset.Store(int64(d)) }

// CurrentOffset returns the offset now in force.
func (o *Offset) CurrentOffset() time.Duration { return time.Duration(o.offset.Load()) }
